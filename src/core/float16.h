// The 16-bit floating-point storage types: BF16 and IEEE half (FP16). Conversion from FP32 rounds
// to nearest even, exactly as the GPU's __float2bfloat16_rn / __float2half_rn do, so the CPU
// backend stores the same bits the CUDA backend would. One storage template, two formats: code
// written for "a 16-bit float" takes either (Float16Storage<Format>), FP32 arithmetic throughout.
#pragma once

#include <cstdint>
#include <cstring>

namespace gpt {

inline uint32_t float_bits(float value) {
  uint32_t bits;
  std::memcpy(&bits, &value, sizeof(bits));
  return bits;
}
inline float float_from_bits(uint32_t bits) {
  float value;
  std::memcpy(&value, &bits, sizeof(value));
  return value;
}

// BF16: FP32's sign and 8-bit exponent, 7 mantissa bits (the upper half of an FP32).
inline uint16_t float_to_bf16_bits(float value) {
  const uint32_t bits = float_bits(value);
  if ((bits & 0x7fffffffu) > 0x7f800000u) {
    return static_cast<uint16_t>((bits >> 16) | 0x0040u);  // NaN stays a (quiet) NaN
  }
  const uint32_t rounding_bias = 0x7fffu + ((bits >> 16) & 1u);
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

inline float bf16_bits_to_float(uint16_t bits) { return float_from_bits(static_cast<uint32_t>(bits) << 16); }

// FP16 (IEEE 754 binary16): sign, 5-bit exponent with bias 15, 10 mantissa bits; largest finite
// value 65504, smallest normal 2^-14, smallest subnormal 2^-24. Values from 65520 up round to
// infinity (65520 lies halfway between 65504 and 2^16 and ties to the even one, 2^16).
inline uint16_t float_to_fp16_bits(float value) {
  const uint32_t bits = float_bits(value);
  const uint16_t sign = static_cast<uint16_t>((bits >> 16) & 0x8000u);
  const uint32_t magnitude = bits & 0x7fffffffu;
  if (magnitude > 0x7f800000u) {  // NaN: quiet, with the top mantissa bits kept
    return static_cast<uint16_t>(sign | 0x7e00u | ((magnitude >> 13) & 0x03ffu));
  }
  if (magnitude >= 0x477ff000u) return static_cast<uint16_t>(sign | 0x7c00u);  // >= 65520: infinity
  if (magnitude >= 0x38800000u) {
    // Normal: re-bias the exponent (127 -> 15) and round the 13 dropped mantissa bits to nearest
    // even; a carry moves into the exponent, which is the right result.
    const uint32_t rebiased = magnitude - (112u << 23);
    const uint32_t rounded = rebiased + 0x0fffu + ((rebiased >> 13) & 1u);
    return static_cast<uint16_t>(sign | (rounded >> 13));
  }
  // Below 2^-14: a subnormal half, round(|value| * 2^24) to nearest even (a carry to 0x400 is the
  // smallest normal, again the right bits). FP32 subnormals are far below half of 2^-24.
  const uint32_t exponent = magnitude >> 23;
  if (exponent < 102) return sign;  // below 2^-25: rounds to zero
  const uint32_t mantissa = (magnitude & 0x007fffffu) | 0x00800000u;
  const uint32_t shift = 126u - exponent;  // 14..24
  uint32_t quotient = mantissa >> shift;
  const uint32_t remainder = mantissa & ((1u << shift) - 1u);
  const uint32_t halfway = 1u << (shift - 1u);
  if (remainder > halfway || (remainder == halfway && (quotient & 1u))) ++quotient;
  return static_cast<uint16_t>(sign | quotient);
}

inline float fp16_bits_to_float(uint16_t bits) {
  const uint32_t sign = static_cast<uint32_t>(bits & 0x8000u) << 16;
  const uint32_t exponent = (bits >> 10) & 0x1fu;
  const uint32_t mantissa = bits & 0x03ffu;
  if (exponent == 0x1fu) return float_from_bits(sign | 0x7f800000u | (mantissa << 13));  // inf, NaN
  if (exponent == 0) {  // zero or subnormal: mantissa x 2^-24, exact in FP32
    const float magnitude = static_cast<float>(mantissa) * 0x1p-24f;
    return sign ? -magnitude : magnitude;
  }
  return float_from_bits(sign | ((exponent + 112u) << 23) | (mantissa << 13));
}

struct Bf16Format {
  static uint16_t encode(float value) { return float_to_bf16_bits(value); }
  static float decode(uint16_t bits) { return bf16_bits_to_float(bits); }
};
struct Fp16Format {
  static uint16_t encode(float value) { return float_to_fp16_bits(value); }
  static float decode(uint16_t bits) { return fp16_bits_to_float(bits); }
};

// Trivially copyable 16-bit value of `Format`; layout-compatible with CUDA's __nv_bfloat16 (bf16)
// and __half (fp16).
template <typename Format>
struct Float16Storage {
  using format = Format;
  uint16_t bits = 0;

  Float16Storage() = default;
  explicit Float16Storage(float value) : bits(Format::encode(value)) {}
  static Float16Storage from_bits(uint16_t raw) {
    Float16Storage result;
    result.bits = raw;
    return result;
  }
  explicit operator float() const { return Format::decode(bits); }
  float to_float() const { return Format::decode(bits); }
};

using bf16 = Float16Storage<Bf16Format>;
using fp16 = Float16Storage<Fp16Format>;
static_assert(sizeof(bf16) == 2 && sizeof(fp16) == 2);

// Rounds an FP32 value to the nearest value of the format and back (what storing in it does).
inline float round_to_bf16(float value) { return bf16_bits_to_float(float_to_bf16_bits(value)); }
inline float round_to_fp16(float value) { return fp16_bits_to_float(float_to_fp16_bits(value)); }

}  // namespace gpt
