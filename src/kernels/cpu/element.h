// Element access shared by the CPU reference kernels: loads widen to FP32, stores round to the
// storage type (round-to-nearest-even for BF16, as the GPU does).
#pragma once

#include <cstdint>

#include "core/bf16.h"
#include "core/tensor.h"

namespace gpt::cpu {

inline float load(const float* p, int64_t i) { return p[i]; }
inline float load(const bf16* p, int64_t i) { return p[i].to_float(); }
inline void store(float* p, int64_t i, float v) { p[i] = v; }
inline void store(bf16* p, int64_t i, float v) { p[i] = bf16(v); }

// Calls fn(T{}) with T = float or bf16 according to `dtype` (fatal for other dtypes).
template <typename Fn>
void dispatch_float_type(DType dtype, Fn&& fn) {
  if (dtype == DType::kFloat32) {
    fn(float{});
  } else {
    GPT_CHECK(dtype == DType::kBFloat16) << "expected float32 or bfloat16, got " << dtype_name(dtype);
    fn(bf16{});
  }
}

// Typed pointer that may be null for an undefined (optional) tensor.
template <typename T>
T* optional_data(const Tensor& t) {
  return t.defined() ? t.data_as<T>() : nullptr;
}

}  // namespace gpt::cpu
