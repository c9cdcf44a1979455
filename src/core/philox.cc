#include "core/philox.h"

#include <cmath>
#include <numbers>

namespace gpt {

double philox_normal(uint64_t key, uint64_t index) {
  const PhiloxBlock block = philox4x32_10(key, 0, index);
  const double u1 = uniform_open_closed(block[0]);
  const double u2 = uniform_open_closed(block[1]);
  return std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * std::numbers::pi * u2);
}

double philox_uniform(uint64_t key, uint64_t index) {
  const PhiloxBlock block = philox4x32_10(key, 1, index);
  const uint64_t bits = (static_cast<uint64_t>(block[0]) << 21) ^ block[1];  // 53 bits
  return static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) / 9007199254740992.0;
}

uint64_t philox_uint64(uint64_t key, uint64_t index) {
  const PhiloxBlock block = philox4x32_10(key, 2, index);
  return (static_cast<uint64_t>(block[0]) << 32) | block[1];
}

}  // namespace gpt
