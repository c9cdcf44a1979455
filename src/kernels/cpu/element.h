// Element access shared by the CPU reference kernels: loads widen to FP32, stores round to the
// storage type (round-to-nearest-even for BF16 and FP16, as the GPU does).
#pragma once

#include <cstdint>

#include "core/float16.h"
#include "core/tensor.h"

namespace gpt::cpu {

inline float load(const float* p, int64_t i) { return p[i]; }
template <typename F>
inline float load(const Float16Storage<F>* p, int64_t i) { return p[i].to_float(); }
inline void store(float* p, int64_t i, float v) { p[i] = v; }
template <typename F>
inline void store(Float16Storage<F>* p, int64_t i, float v) { p[i] = Float16Storage<F>(v); }

// Calls fn(T{}) with T = float, bf16 or fp16 according to `dtype` (fatal for other dtypes).
template <typename Fn>
void dispatch_float_type(DType dtype, Fn&& fn) {
  if (dtype == DType::kFloat32) {
    fn(float{});
  } else if (dtype == DType::kBFloat16) {
    fn(bf16{});
  } else {
    GPT_CHECK(dtype == DType::kFloat16) << "expected float32, bfloat16 or float16, got " << dtype_name(dtype);
    fn(fp16{});
  }
}

// Typed pointer that may be null for an undefined (optional) tensor.
template <typename T>
T* optional_data(const Tensor& t) {
  return t.defined() ? t.data_as<T>() : nullptr;
}

}  // namespace gpt::cpu
