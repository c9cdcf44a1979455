#include "core/strict_number.h"

#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <string>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpt {
namespace {

bool is_digit(char c) { return c >= '0' && c <= '9'; }

// Quoted for messages; an empty value is named as such rather than shown as ''.
std::string shown(std::string_view text) {
  return text.empty() ? std::string("an empty value") : absl::StrCat("'", std::string(text), "'");
}

// Length of the run of digits starting at text[i].
size_t digits_at(std::string_view text, size_t i) {
  size_t n = 0;
  while (i + n < text.size() && is_digit(text[i + n])) ++n;
  return n;
}

}  // namespace

absl::StatusOr<int64_t> parse_decimal_integer(std::string_view text, int64_t min, int64_t max) {
  size_t i = 0;
  const bool negative = !text.empty() && text[0] == '-';
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) i = 1;
  if (i == text.size() || digits_at(text, i) != text.size() - i) {
    return absl::InvalidArgumentError(absl::StrCat("expected a decimal integer, got ", shown(text)));
  }
  // The magnitude, saturating one past the largest that could be in range (2^63).
  constexpr uint64_t kLimit = uint64_t{1} << 63;
  uint64_t magnitude = 0;
  for (; i < text.size(); ++i) {
    magnitude = magnitude * 10 + static_cast<uint64_t>(text[i] - '0');
    if (magnitude > kLimit) break;
  }
  const bool representable = magnitude < kLimit || (negative && magnitude == kLimit);
  if (representable) {
    const int64_t value = negative ? static_cast<int64_t>(0 - magnitude) : static_cast<int64_t>(magnitude);
    if (value >= min && value <= max) return value;
    // Both ends when the range has both ("from 1 to 4096"), else the one it has.
    const bool bounded_below = min > std::numeric_limits<int64_t>::min();
    const bool bounded_above = max < std::numeric_limits<int64_t>::max();
    const std::string range = bounded_below && bounded_above ? absl::StrCat("from ", min, " to ", max)
                              : value < min                  ? absl::StrCat("at least ", min)
                                                             : absl::StrCat("at most ", max);
    return absl::InvalidArgumentError(absl::StrCat("must be ", range, " (got ", value, ")"));
  }
  return absl::InvalidArgumentError(absl::StrCat(shown(text), " is out of range (",
                                                 negative ? absl::StrCat("at least ", min) : absl::StrCat("at most ", max),
                                                 ")"));
}

absl::StatusOr<double> parse_finite_number(std::string_view text) {
  size_t i = 0;
  if (!text.empty() && (text[0] == '-' || text[0] == '+')) ++i;
  const size_t integer_digits = digits_at(text, i);
  i += integer_digits;
  size_t fraction_digits = 0;
  if (i < text.size() && text[i] == '.') {
    fraction_digits = digits_at(text, i + 1);
    i += 1 + fraction_digits;
  }
  bool well_formed = integer_digits + fraction_digits > 0;
  if (well_formed && i < text.size() && (text[i] == 'e' || text[i] == 'E')) {
    size_t j = i + 1;
    if (j < text.size() && (text[j] == '-' || text[j] == '+')) ++j;
    const size_t exponent_digits = digits_at(text, j);
    well_formed = exponent_digits > 0;
    i = j + exponent_digits;
  }
  if (!well_formed || i != text.size()) {
    return absl::InvalidArgumentError(absl::StrCat("expected a finite decimal number, got ", shown(text)));
  }
  const std::string copy(text);  // strtod needs the terminator
  errno = 0;
  const double value = std::strtod(copy.c_str(), nullptr);
  if (errno == ERANGE && std::isinf(value)) {
    return absl::InvalidArgumentError(absl::StrCat(shown(text), " is out of range (beyond the largest double, 1.8e308)"));
  }
  return value;
}

std::string number_text(double value) {
  // The shortest %g that reads back as `value` (6 digits at least: "1048576", "0.1", "1e12"), with
  // the exponent as a user types it: "1e12" rather than "1e+12", "1e-5" rather than "1e-05".
  std::string text = absl::StrFormat("%g", value);
  for (int digits = 7; std::isfinite(value) && std::strtod(text.c_str(), nullptr) != value && digits <= 17; ++digits) {
    text = absl::StrFormat("%.*g", digits, value);
  }
  const size_t e = text.find('e');
  if (e == std::string::npos) return text;
  std::string exponent = text.substr(e + 1);
  const bool negative = !exponent.empty() && exponent[0] == '-';
  if (!exponent.empty() && (exponent[0] == '+' || exponent[0] == '-')) exponent.erase(0, 1);
  while (exponent.size() > 1 && exponent[0] == '0') exponent.erase(0, 1);
  return absl::StrCat(text.substr(0, e + 1), negative ? "-" : "", exponent);
}

bool NumberRange::contains(double value) const {
  if (!std::isfinite(value) || value > max) return false;
  return min_open ? value > min : value >= min;
}

std::string NumberRange::describe() const {
  constexpr double kHuge = std::numeric_limits<double>::max();
  const bool bounded_below = min > -kHuge, bounded_above = max < kHuge;
  if (min_open && bounded_below) {
    return bounded_above ? absl::StrCat("above ", number_text(min), " and at most ", number_text(max))
                         : absl::StrCat("above ", number_text(min));
  }
  if (bounded_below && bounded_above) return absl::StrCat("from ", number_text(min), " to ", number_text(max));
  if (bounded_below) return absl::StrCat("at least ", number_text(min));
  if (bounded_above) return absl::StrCat("at most ", number_text(max));
  return "finite";
}

absl::Status check_number(double value, const NumberRange& range) {
  if (range.contains(value)) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat("must be ", range.describe(), " (got ", number_text(value), ")"));
}

absl::StatusOr<double> parse_number_in(std::string_view text, const NumberRange& range) {
  GPT_ASSIGN_OR_RETURN(const double value, parse_finite_number(text));
  GPT_RETURN_IF_ERROR(check_number(value, range));
  return value;
}

}  // namespace gpt
