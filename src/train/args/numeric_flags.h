// Strict numeric flags for the CLI11 command lines (pretrain_gpt, preprocess_data): transforms
// that refuse what core/strict_number.h refuses and hand CLI11 the canonical text. CLI11 2.1 reads
// integers with strtoll(base 0), so "010" would be octal 8 and an overflow a silent clamp; floats
// with strtold, so "inf", "nan", "0x1p3" and "1e400" would pass. A refusal reaches the user as
// "--flag: <what is wrong>". Header-only (CLI11 and gpt_core), so every tool can use it.
#pragma once

#include <cstdint>
#include <limits>
#include <string>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "core/strict_number.h"

namespace gpt {

// A decimal integer in [min, max]; the text CLI11 then converts is the value's canonical decimal
// form ("010" becomes "10").
inline CLI::Validator decimal_integer(int64_t min = std::numeric_limits<int64_t>::min(),
                                      int64_t max = std::numeric_limits<int64_t>::max()) {
  return CLI::Validator(
      [min, max](std::string& text) -> std::string {
        const absl::StatusOr<int64_t> value = parse_decimal_integer(text, min, max);
        if (!value.ok()) return std::string(value.status().message());
        text = std::to_string(*value);
        return "";
      },
      "");
}

// A finite decimal number; the text is left as typed (CLI11 converts it as before).
inline CLI::Validator finite_number() {
  return CLI::Validator(
      [](std::string& text) -> std::string {
        const absl::StatusOr<double> value = parse_finite_number(text);
        return value.ok() ? "" : std::string(value.status().message());
      },
      "");
}

// A finite decimal number inside `range` (core/strict_number.h): NaN and the infinities never
// reach a comparison, and the message says the range as a user writes it ("--top-p: must be
// from 0 to 1 (got 2)"), unlike CLI::Range, which lets NaN through and prints 309-digit bounds.
inline CLI::Validator number_in(const NumberRange& range) {
  return CLI::Validator(
      [range](std::string& text) -> std::string {
        const absl::StatusOr<double> value = parse_number_in(text, range);
        return value.ok() ? "" : std::string(value.status().message());
      },
      "");
}

// Puts the strict transforms (full int64 range) on every integer and floating-point option of
// `app` (by CLI11's type name), so that a numeric flag added later is strict without anyone
// remembering to. For apps whose integer options are int64_t; narrower ones want decimal_integer
// with their own range.
// Subcommands' options too (ckpt_tool's).
inline void make_numeric_options_strict(CLI::App& app) {
  for (CLI::Option* option : app.get_options()) {
    const std::string type = option->get_type_name();
    if (type == "INT") option->transform(decimal_integer());
    if (type == "FLOAT") option->transform(finite_number());
  }
  for (CLI::App* command : app.get_subcommands(std::function<bool(CLI::App*)>())) make_numeric_options_strict(*command);
}

}  // namespace gpt
