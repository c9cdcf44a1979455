// Strict parsing of numbers a user types (command-line flags). The C library's readers that CLI11
// and friends use accept far more than a user means: strtoll(base 0) reads "010" as octal 8 and
// "0x10" as 16, clamps "99999999999999999999" to INT64_MAX without a word, and strtod takes "inf",
// "nan", hex floats and "1e400" (infinity). These accept plain decimal text only and say what is
// wrong; the caller names the flag.
#pragma once

#include <cstdint>
#include <limits>
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

}  // namespace gpt
