#include "data/numpy_random_state.h"

namespace gpt {

double NumpyRandomState::random_sample() {
  const int32_t a = static_cast<int32_t>(next_uint32() >> 5), b = static_cast<int32_t>(next_uint32() >> 6);
  return (a * 67108864.0 + b) / 9007199254740992.0;
}

uint64_t NumpyRandomState::random_interval(uint64_t max) {
  if (max == 0) return 0;
  uint64_t mask = max;
  for (int shift = 1; shift <= 32; shift *= 2) mask |= mask >> shift;
  uint64_t value = 0;
  if (max <= 0xffffffffull) {
    while ((value = next_uint32() & mask) > max) {
    }
  } else {
    while ((value = next_uint64() & mask) > max) {
    }
  }
  return value;
}

}  // namespace gpt
