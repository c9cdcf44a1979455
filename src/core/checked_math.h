// Overflow-checked int64 arithmetic for sizes derived from user input (flags, file headers): each
// function gives the exact result, or nullopt where it does not fit in int64_t. Sizes are signed
// throughout the project, and a wrapped product is a plausible-looking wrong size (or UB), so every
// product of two user-controlled numbers goes through here before it sizes anything.
#pragma once

#include <cstdint>
#include <optional>

namespace gpt {

inline std::optional<int64_t> checked_add(int64_t a, int64_t b) {
  int64_t result = 0;
  if (__builtin_add_overflow(a, b, &result)) return std::nullopt;
  return result;
}

inline std::optional<int64_t> checked_multiply(int64_t a, int64_t b) {
  int64_t result = 0;
  if (__builtin_mul_overflow(a, b, &result)) return std::nullopt;
  return result;
}

// a * b * c * ...: nullopt as soon as a partial product overflows.
template <typename... Rest>
std::optional<int64_t> checked_product(int64_t first, Rest... rest) {
  std::optional<int64_t> product = first;
  ((product = product ? checked_multiply(*product, static_cast<int64_t>(rest)) : std::nullopt), ...);
  return product;
}

// The smallest multiple of `multiple` (> 0) that is >= value (>= 0), e.g. a padded vocabulary.
inline std::optional<int64_t> checked_round_up(int64_t value, int64_t multiple) {
  if (value < 0 || multiple <= 0) return std::nullopt;
  const int64_t quotient = value / multiple + (value % multiple != 0 ? 1 : 0);
  return checked_multiply(quotient, multiple);
}

// An int64 that stays "overflowed" once any step overflows: a sum of products reads as its
// formula, and one check at the end says whether the figure is real.
class CheckedBytes {
 public:
  CheckedBytes(int64_t value) : value_(value), ok_(true) {}  // NOLINT: implicit, so that formulas read naturally
  CheckedBytes(std::optional<int64_t> value) : value_(value.value_or(0)), ok_(value.has_value()) {}  // NOLINT
  friend CheckedBytes operator+(CheckedBytes a, CheckedBytes b) {
    return a.ok_ && b.ok_ ? CheckedBytes(checked_add(a.value_, b.value_)) : CheckedBytes(std::nullopt);
  }
  friend CheckedBytes operator*(CheckedBytes a, CheckedBytes b) {
    return a.ok_ && b.ok_ ? CheckedBytes(checked_multiply(a.value_, b.value_)) : CheckedBytes(std::nullopt);
  }
  // The smallest multiple of `multiple` (> 0) that is >= the value (>= 0): an allocation's aligned size.
  CheckedBytes round_up(int64_t multiple) const {
    return ok_ ? CheckedBytes(checked_round_up(value_, multiple)) : CheckedBytes(std::nullopt);
  }
  std::optional<int64_t> value() const { return ok_ ? std::optional<int64_t>(value_) : std::nullopt; }
  friend bool operator==(CheckedBytes a, CheckedBytes b) { return a.value() == b.value(); }

 private:
  int64_t value_;
  bool ok_;
};

}  // namespace gpt
