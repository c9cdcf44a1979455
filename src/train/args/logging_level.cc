#include "train/args/logging_level.h"

#include <cstdlib>
#include <string>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "core/logging.h"
#include "core/strict_number.h"
#include "train/args/flag_table.h"

namespace gpt {

absl::StatusOr<std::optional<int64_t>> logging_level(const Arguments& a) {
  if (flag_given(a, &Arguments::logging_level)) return std::optional<int64_t>(a.logging_level);
  const char* env = std::getenv("MEGATRON_LOGGING_LEVEL");
  if (env == nullptr) return std::optional<int64_t>();
  // Python's int() allows surrounding whitespace.
  const absl::StatusOr<int64_t> level = parse_decimal_integer(std::string(absl::StripAsciiWhitespace(env)));
  if (!level.ok()) {
    return absl::InvalidArgumentError(absl::StrCat("MEGATRON_LOGGING_LEVEL=", std::string(env).substr(0, 40),
                                                   ": not an integer logging level (", level.status().message(),
                                                   "); Python's levels are DEBUG 10, INFO 20, WARNING 30, ERROR 40"));
  }
  return std::optional<int64_t>(*level);
}

absl::Status apply_logging_level(const Arguments& a) {
  GPT_ASSIGN_OR_RETURN(const std::optional<int64_t> level, logging_level(a));
  if (level) set_log_threshold(*level);
  return absl::OkStatus();
}

}  // namespace gpt
