// Element types of tensors.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

#include "core/float16.h"

namespace gpt {

// New values go last: checkpoints and messages name dtypes, never their numbers, but keep it stable.
enum class DType : uint8_t { kFloat32, kBFloat16, kInt32, kInt64, kFloat16 };

constexpr size_t dtype_size(DType dtype) {
  switch (dtype) {
    case DType::kFloat32: return 4;
    case DType::kBFloat16: return 2;
    case DType::kFloat16: return 2;
    case DType::kInt32: return 4;
    case DType::kInt64: return 8;
  }
  return 0;
}

std::string_view dtype_name(DType dtype);

// The 16-bit floating-point storage dtypes (bfloat16 and float16): FP32 master weights and
// arithmetic, storage rounded to nearest even.
constexpr bool is_float16_dtype(DType dtype) { return dtype == DType::kBFloat16 || dtype == DType::kFloat16; }
constexpr bool is_float_dtype(DType dtype) { return dtype == DType::kFloat32 || is_float16_dtype(dtype); }

template <typename T> constexpr DType dtype_of();
template <> constexpr DType dtype_of<float>() { return DType::kFloat32; }
template <> constexpr DType dtype_of<bf16>() { return DType::kBFloat16; }
template <> constexpr DType dtype_of<fp16>() { return DType::kFloat16; }
template <> constexpr DType dtype_of<int32_t>() { return DType::kInt32; }
template <> constexpr DType dtype_of<int64_t>() { return DType::kInt64; }

enum class Device : uint8_t { kCpu, kCuda };
std::string_view device_name(Device device);

}  // namespace gpt
