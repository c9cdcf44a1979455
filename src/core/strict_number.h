// Strict parsing of numbers a user types (command-line flags). The C library's readers that CLI11
// and friends use accept far more than a user means: strtoll(base 0) reads "010" as octal 8 and
// "0x10" as 16, clamps "99999999999999999999" to INT64_MAX without a word, and strtod takes "inf",
// "nan", hex floats and "1e400" (infinity). These accept plain decimal text only and say what is
// wrong; the caller names the flag.
#pragma once

#include <cstdint>
#include <limits>
#include <string>
#include <string_view>

#include "core/status.h"

namespace gpt {

// [+-]digits, read as decimal: a leading zero is not octal ("010" is 10, as Python's int() and so
// Megatron's argparse read it). Out of [min, max] is an error, never a clamp.
absl::StatusOr<int64_t> parse_decimal_integer(std::string_view text,
                                              int64_t min = std::numeric_limits<int64_t>::min(),
                                              int64_t max = std::numeric_limits<int64_t>::max());

// [+-](digits[.digits] | .digits)[(e|E)[+-]digits]: finite by construction. A value beyond the
// double range ("1e400") is an error; one below it rounds towards zero as strtod does.
absl::StatusOr<double> parse_finite_number(std::string_view text);

// The documented range of a floating-point value: [min, max], or (min, max] with `min_open`.
// Messages say it the way a user writes it ("from 0 to 1", "above 0 and at most 1e12"), with
// bounds in %g form, never a 309-digit double.
struct NumberRange {
  double min = -std::numeric_limits<double>::max();
  double max = std::numeric_limits<double>::max();
  bool min_open = false;

  static constexpr NumberRange from_to(double low, double high) { return {low, high, false}; }
  static constexpr NumberRange above(double low, double high) { return {low, high, true}; }
  bool contains(double value) const;  // false for NaN
  std::string describe() const;       // "from 0 to 1", "above 0 and at most 1e12"
};

// A finite value inside `range`; the error says the range and the value ("must be from 0 to 1
// (got nan)"). For numbers that come from files and computations as well as from text.
absl::Status check_number(double value, const NumberRange& range);

// parse_finite_number, then check_number.
absl::StatusOr<double> parse_number_in(std::string_view text, const NumberRange& range);

// A double for messages: the shortest %g form that reads back as it, its exponent as typed ("1e12",
// "0.5", "1e-5", "1048576", "nan").
std::string number_text(double value);

}  // namespace gpt
