// FP32 vectors for the CPU reference kernels (GCC/Clang vector extensions): eight lanes (SSE2 pairs on
// baseline x86-64, one AVX register in a GPT_CPU_CLONES function on a machine that has AVX2) and
// sixteen (one AVX-512 register in a GPT_CPU_WIDE_CLONES function on a machine that has it, two
// AVX registers or four SSE ones elsewhere), and an exp that vectorizes at either width.
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

// As GPT_CPU_CLONES plus an x86-64-v4 (AVX-512) clone, for the loops written on 16-lane vectors
// (cross-entropy over the vocabulary). Every clone computes the same values lane by lane (the
// same operations on the same 16-lane groups; FMA contraction as in the v3 clone).
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_ADDRESS__)
#define GPT_CPU_WIDE_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define GPT_CPU_WIDE_CLONES
#endif

namespace gpt::cpu::simd {

constexpr int kLanes = 8;
typedef float f32x8 __attribute__((vector_size(32)));
typedef int32_t i32x8 __attribute__((vector_size(32)));
typedef uint32_t u32x8 __attribute__((vector_size(32)));
constexpr int kWideLanes = 16;
typedef float f32x16 __attribute__((vector_size(64)));
typedef int32_t i32x16 __attribute__((vector_size(64)));

// The integer vector of an FP32 vector's width (what a comparison of two of them gives).
template <typename F>
using IntOf = decltype(F{} < F{});
template <typename F>
constexpr int lanes_of = static_cast<int>(sizeof(F) / sizeof(float));
template <typename F>
GPT_SIMD_INLINE F splat_as(float v) { return F{} + v; }

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
// FP16 has no shift-only widening (its exponent is re-biased): lane by lane.
GPT_SIMD_INLINE f32x8 load8(const fp16* p) {
  f32x8 v;
  for (int i = 0; i < kLanes; ++i) v[i] = p[i].to_float();
  return v;
}
GPT_SIMD_INLINE void store8(fp16* p, f32x8 v) {
  for (int i = 0; i < kLanes; ++i) p[i] = fp16(v[i]);
}
GPT_SIMD_INLINE f32x16 load16(const float* p) {
  f32x16 v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
// 16-bit storage (bf16, fp16): two 8-lane loads.
template <typename Format>
GPT_SIMD_INLINE f32x16 load16(const Float16Storage<Format>* p) {
  const f32x8 low = load8(p), high = load8(p + kLanes);
  f32x16 v;
  std::memcpy(&v, &low, sizeof(low));
  std::memcpy(reinterpret_cast<char*>(&v) + sizeof(low), &high, sizeof(high));
  return v;
}
GPT_SIMD_INLINE void store8(float* p, f32x8 v) { std::memcpy(p, &v, sizeof(v)); }
GPT_SIMD_INLINE void store16(float* p, f32x16 v) { std::memcpy(p, &v, sizeof(v)); }
template <typename Format>
GPT_SIMD_INLINE void store16(Float16Storage<Format>* p, f32x16 v) {
  for (int i = 0; i < kWideLanes; ++i) p[i] = Float16Storage<Format>(v[i]);
}
GPT_SIMD_INLINE void store8(bf16* p, f32x8 v) {
  for (int i = 0; i < kLanes; ++i) p[i] = bf16(v[i]);
}

template <typename I>
GPT_SIMD_INLINE auto as_float(I bits) {
  typedef float F __attribute__((vector_size(sizeof(I))));
  F v;
  std::memcpy(&v, &bits, sizeof(v));
  return v;
}
template <typename F>
GPT_SIMD_INLINE IntOf<F> as_int(F v) {
  IntOf<F> bits;
  std::memcpy(&bits, &v, sizeof(bits));
  return bits;
}
// mask ? a : b, lane by lane (mask lanes all ones or all zeros, as comparisons give).
template <typename F>
GPT_SIMD_INLINE F select(IntOf<F> mask, F a, F b) { return as_float((as_int(a) & mask) | (as_int(b) & ~mask)); }
template <typename F>
GPT_SIMD_INLINE F max(F a, F b) { return select<F>(b > a, b, a); }  // a where b is NaN, as std::max(a, b)

template <typename F>
GPT_SIMD_INLINE float horizontal_max(F v) {
  float m = v[0];
  for (int i = 1; i < lanes_of<F>; ++i) m = v[i] > m ? v[i] : m;
  return m;
}
template <typename F>
GPT_SIMD_INLINE double horizontal_sum(F v) {
  double s = 0.0;
  for (int i = 0; i < lanes_of<F>; ++i) s += v[i];
  return s;
}

// e^x for each lane: Cephes' expf (range reduction by ln 2 in two parts, degree-6 polynomial on
// [-ln2/2, ln2/2], scaling by 2^n through the exponent bits). Maximum relative error about 2 ulp
// (2.4e-7) for x in [-87.3, 88.7]; 0 below (where e^x < 1.2e-38); x is clamped to 88.7 above
// (callers use it on x <= 0). NaN stays NaN.
template <typename F>
GPT_SIMD_INLINE F exp(F x) {
  using I = IntOf<F>;
  const F lo = splat_as<F>(-87.3f), hi = splat_as<F>(88.7f);
  const I underflow = x < lo;
  F v = select<F>(x > hi, hi, select<F>(underflow, lo, x));
  // n = round(x / ln 2) by the 1.5 * 2^23 trick (round to nearest even; exact for |n| < 2^22).
  const F magic = splat_as<F>(12582912.0f);
  const F t = v * 1.44269504088896341f + magic;
  const F n = t - magic;
  v = v - n * 0.693359375f;
  v = v - n * -2.12194440e-4f;
  F p = splat_as<F>(1.9875691500e-4f);
  p = p * v + 1.3981999507e-3f;
  p = p * v + 8.3334519073e-3f;
  p = p * v + 4.1665795894e-2f;
  p = p * v + 1.6666665459e-1f;
  p = p * v + 5.0000001201e-1f;
  p = p * (v * v) + v + 1.0f;
  // 2^n from the low bits of t (t = 1.5 * 2^23 + n); n in [-126, 128] after the clamp.
  const I scale_bits = ((as_int(t) - 0x4B400000) + 127) << 23;
  return select<F>(underflow, splat_as<F>(0.0f), p * as_float(scale_bits));
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
  return exp<f32x8>(v)[0];
}

}  // namespace gpt::cpu::simd
