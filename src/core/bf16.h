// BF16 storage type. Conversion from FP32 rounds to nearest even, exactly as the GPU's
// __float2bfloat16_rn does, so the CPU backend stores the same bits the CUDA backend would.
#pragma once

#include <cstdint>
#include <cstring>

namespace gpt {

inline uint16_t float_to_bf16_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN stays a (quiet) NaN
  }
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

inline float bf16_bits_to_float(uint16_t bits) {
  const uint32_t widened = static_cast<uint32_t>(bits) << 16;
  float value;
  std::memcpy(&value, &widened, sizeof(value));
  return value;
}

// Trivially copyable 16-bit value; layout-compatible with CUDA's __nv_bfloat16.
struct bf16 {
  uint16_t bits = 0;

  bf16() = default;
  explicit bf16(float value) : bits(float_to_bf16_bits(value)) {}
  static bf16 from_bits(uint16_t raw) {
    bf16 result;
    result.bits = raw;
    return result;
  }
  explicit operator float() const { return bf16_bits_to_float(bits); }
  float to_float() const { return bf16_bits_to_float(bits); }
};
static_assert(sizeof(bf16) == 2);

// Rounds an FP32 value to the nearest BF16 value and back (what storing in BF16 does).
inline float round_to_bf16(float value) { return bf16_bits_to_float(float_to_bf16_bits(value)); }

}  // namespace gpt
