// Eight-lane FP32 vectors for the CPU reference kernels (GCC/Clang vector extensions: SSE2 pairs
// on baseline x86-64, one AVX register in a GPT_CPU_CLONES function on a machine that has AVX2),
// and an exp that vectorizes.
#pragma once

#include <cstdint>
#include <cstring>

#include "core/float16.h"

// 32-byte vectors passed between inlined helpers; the ABI note does not apply.
#pragma GCC diagnostic ignored "-Wpsabi"
#define GPT_SIMD_INLINE inline __attribute__((always_inline))

// Compiles a function for the baseline ISA and again for x86-64-v3 (AVX2, FMA), chosen at load
// time by the CPU (GCC/Clang function multiversioning); nothing elsewhere. The clones compute the
// same values except where the compiler contracts a * b + c into an FMA (a rounding difference).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define GPT_CPU_CLONES __attribute__((target_clones("arch=x86-64-v3", "default")))
#else
#define GPT_CPU_CLONES
#endif

namespace gpt::cpu::simd {

constexpr int kLanes = 8;
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));

GPT_SIMD_INLINE f32x8 splat(float v) { return f32x8{v, v, v, v, v, v, v, v}; }
GPT_SIMD_INLINE i32x8 splat_i(int32_t v) { return i32x8{v, v, v, v, v, v, v, v}; }

GPT_SIMD_INLINE f32x8 load8(const float* p) {
  f32x8 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
GPT_SIMD_INLINE f32x8 load8(const bf16* p) {
  uint16_t raw[kLanes];
  std::memcpy(raw, p, sizeof(raw));
  u32x8 wide;
  for (int i = 0; i < kLanes; ++i) wide[i] = static_cast<uint32_t>(raw[i]) << 16;
  f32x8 v;
  std::memcpy(&v, &wide, sizeof(v));
  return v;
}
GPT_SIMD_INLINE void store8(float* p, f32x8 v) { std::memcpy(p, &v, sizeof(v)); }
GPT_SIMD_INLINE void store8(bf16* p, f32x8 v) {
  for (int i = 0; i < kLanes; ++i) p[i] = bf16(v[i]);
}
// FP16 has no shift-only widening (its exponent is re-biased): lane by lane.
GPT_SIMD_INLINE f32x8 load8(const fp16* p) {
  f32x8 v;
  for (int i = 0; i < kLanes; ++i) v[i] = p[i].to_float();
  return v;
}
GPT_SIMD_INLINE void store8(fp16* p, f32x8 v) {
  for (int i = 0; i < kLanes; ++i) p[i] = fp16(v[i]);
}

GPT_SIMD_INLINE f32x8 as_float(i32x8 bits) {
  f32x8 v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}
GPT_SIMD_INLINE i32x8 as_int(f32x8 v) {
  i32x8 bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}
// mask ? a : b, lane by lane (mask lanes all ones or all zeros, as comparisons give).
GPT_SIMD_INLINE f32x8 select(i32x8 mask, f32x8 a, f32x8 b) { return as_float((as_int(a) & mask) | (as_int(b) & ~mask)); }
GPT_SIMD_INLINE f32x8 max(f32x8 a, f32x8 b) { return select(b > a, b, a); }  // a where b is NaN, as std::max(a, b)

GPT_SIMD_INLINE float horizontal_max(f32x8 v) {
  float m = v[0];
  for (int i = 1; i < kLanes; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
GPT_SIMD_INLINE double horizontal_sum(f32x8 v) {
  double s = 0.0;
  for (int i = 0; i < kLanes; ++i) s += v[i];
  return s;
}

// e^x for each lane: Cephes' expf (range reduction by ln 2 in two parts, degree-6 polynomial on
// [-ln2/2, ln2/2], scaling by 2^n through the exponent bits). Maximum relative error about 2 ulp
// (2.4e-7) for x in [-87.3, 88.7]; 0 below (where e^x < 1.2e-38); x is clamped to 88.7 above
// (callers use it on x <= 0). NaN stays NaN.
GPT_SIMD_INLINE f32x8 exp(f32x8 x) {
  const f32x8 lo = splat(-87.3f), hi = splat(88.7f);
  const i32x8 underflow = x < lo;
  f32x8 v = select(x > hi, hi, select(underflow, lo, x));
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (round to nearest even; exact for |n| < 2^22).
  const f32x8 magic = splat(12582912.0f);
  const f32x8 t = v * splat(1.44269504088896341f) + magic;
  const f32x8 n = t - magic;
  v = v - n * splat(0.693359375f);
  v = v - n * splat(-2.12194440e-4f);
  f32x8 p = splat(1.9875691500e-4f);
  p = p * v + splat(1.3981999507e-3f);
  p = p * v + splat(8.3334519073e-3f);
  p = p * v + splat(4.1665795894e-2f);
  p = p * v + splat(1.6666665459e-1f);
  p = p * v + splat(5.0000001201e-1f);
  p = p * (v * v) + v + splat(1.0f);
  // 2^n from the low bits of t (t = 1.5 * 2^23 + n); n in [-126, 128] after the clamp.
  const i32x8 scale_bits = ((as_int(t) - splat_i(0x4B400000)) + splat_i(127)) << 23;
  return select(underflow, splat(0.0f), p * as_float(scale_bits));
}

// tanh(u) = 1 - 2 / (e^{2u} + 1): absolute error a few 1e-8 (relative error larger only where
// |tanh u| is tiny, which GeLU's 1 + tanh and 1 - tanh^2 do not see); +-1 for large |u|.
GPT_SIMD_INLINE f32x8 tanh(f32x8 u) { return splat(1.0f) - splat(2.0f) / (exp(u + u) + splat(1.0f)); }

// GeLU, tanh approximation (Megatron's / PyTorch's approximate="tanh"), and its derivative.
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
GPT_SIMD_INLINE f32x8 gelu(f32x8 v) {
  return splat(0.5f) * v * (splat(1.0f) + tanh(splat(kSqrt2OverPi) * (v + splat(kGeluCubic) * v * v * v)));
}
GPT_SIMD_INLINE f32x8 gelu_derivative(f32x8 v) {
  const f32x8 t = tanh(splat(kSqrt2OverPi) * (v + splat(kGeluCubic) * v * v * v));
  const f32x8 d_inner = splat(kSqrt2OverPi) * (splat(1.0f) + splat(3.0f * kGeluCubic) * v * v);
  return splat(0.5f) * (splat(1.0f) + t) + splat(0.5f) * v * (splat(1.0f) - t * t) * d_inner;
}

// The first n < 8 elements as a vector (the other lanes 0), and back: loop tails go through the
// same vector code, so an element's value never depends on where a range starts or ends.
template <typename T>
GPT_SIMD_INLINE f32x8 load_partial(const T* p, int64_t n) {
  f32x8 v = splat(0.0f);
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (sizeof(T) == 4) {
      v[i] = p[i];
    } else {
      v[i] = p[i].to_float();
    }
  }
  return v;
}
template <typename T>
GPT_SIMD_INLINE void store_partial(T* p, int64_t n, f32x8 v) {
  for (int64_t i = 0; i < n; ++i) {
    if constexpr (sizeof(T) == 4) {
      p[i] = v[i];
    } else {
      p[i] = T(v[i]);
    }
  }
}

// Scalar e^x with the same formula, for loop tails (so a value never depends on its position).
GPT_SIMD_INLINE float exp1(float x) {
  f32x8 v = splat(x);
  return exp(v)[0];
}

}  // namespace gpt::cpu::simd
