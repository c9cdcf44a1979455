// FP8 number formats of Transformer Engine's recipes (OCP FP8: E4M3 without infinities, max 448;
// E5M2, max 57344) and the cast the GPU's cvt.rn.satfinite does: round to nearest even, finite
// values beyond the largest saturate to it (infinities too), NaN stays NaN. The CPU backend
// emulates FP8 GEMMs with this cast, so every FP8 path and layout runs in CI.
#pragma once

#include <cmath>
#include <cstdint>
#include <string_view>

namespace gpt {

enum class Fp8Format { kE4M3, kE5M2 };

inline std::string_view fp8_format_name(Fp8Format format) { return format == Fp8Format::kE4M3 ? "e4m3" : "e5m2"; }

struct Fp8Limits {
  int mantissa_bits;     // stored fraction bits
  int min_exponent;      // exponent of the smallest normal value (subnormals share its quantum)
  float max_finite;      // the largest finite value
};

constexpr Fp8Limits fp8_limits(Fp8Format format) {
  return format == Fp8Format::kE4M3 ? Fp8Limits{3, -6, 448.0f} : Fp8Limits{2, -14, 57344.0f};
}

// x rounded to the nearest value of the format (ties to even), saturated to +-max_finite.
inline float round_to_fp8(float x, Fp8Format format) {
  if (std::isnan(x)) return x;
  const Fp8Limits limits = fp8_limits(format);
  const float magnitude = std::fabs(x);
  if (magnitude >= limits.max_finite) return std::copysign(limits.max_finite, x);
  if (magnitude == 0.0f) return x;
  int exponent = 0;
  std::frexp(magnitude, &exponent);  // magnitude = f * 2^exponent, f in [0.5, 1)
  exponent = std::max(exponent - 1, limits.min_exponent);
  // Values of this binade (or the subnormal range) are multiples of 2^(exponent - mantissa_bits);
  // the division by a power of two is exact, and nearbyint rounds ties to even.
  const float quantum = std::ldexp(1.0f, exponent - limits.mantissa_bits);
  const float rounded = std::nearbyint(magnitude / quantum) * quantum;
  return std::copysign(std::fmin(rounded, limits.max_finite), x);
}

}  // namespace gpt
