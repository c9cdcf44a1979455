// Shared by the CUDA kernels: element conversions (storage T in {float, __nv_bfloat16, __half}, FP32 math),
// warp and block reductions, launch helpers. Include only from src/kernels/cuda.
#pragma once

#include <cuda_bf16.h>
#include <cuda_fp16.h>
#include <cuda_runtime.h>

#include <cstdint>

#include "core/context.h"
#include "core/cuda_check.h"
#include "core/cuda_device_context.cuh"
#include "core/tensor.h"

namespace gpt::cuda_kernels {

__device__ __forceinline__ float to_float(float v) { return v; }
__device__ __forceinline__ float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }
__device__ __forceinline__ float to_float(__half v) { return __half2float(v); }
template <typename T>
__device__ __forceinline__ T from_float(float v);
template <>
__device__ __forceinline__ float from_float<float>(float v) { return v; }
template <>
__device__ __forceinline__ __nv_bfloat16 from_float<__nv_bfloat16>(float v) { return __float2bfloat16_rn(v); }
template <>
__device__ __forceinline__ __half from_float<__half>(float v) { return __float2half_rn(v); }

__device__ __forceinline__ float warp_sum(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ float warp_max(float v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Reduction over the block (blockDim.x a multiple of 32, at most 1024); every thread gets the
// result. The order of operations is fixed by the launch shape, so results are deterministic.
template <typename WarpReduce>
__device__ __forceinline__ float block_reduce(float v, float identity, WarpReduce warp_reduce) {
  __shared__ float partial[32];
  __shared__ float total;
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  v = warp_reduce(v);
  __syncthreads();
  if (lane == 0) partial[warp] = v;
  __syncthreads();
  if (warp == 0) {
    float w = lane < static_cast<int>(blockDim.x / 32) ? partial[lane] : identity;
    w = warp_reduce(w);
    if (lane == 0) total = w;
  }
  __syncthreads();
  return total;
}

__device__ __forceinline__ float block_sum(float v) {
  return block_reduce(v, 0.0f, [](float x) { return warp_sum(x); });
}
__device__ __forceinline__ float block_max(float v) {
  return block_reduce(v, -INFINITY, [](float x) { return warp_max(x); });
}

inline cudaStream_t stream_of(Context& ctx) { return ctx.cuda().stream(); }

// Blocks for one item per thread, capped (grid x is limited and huge grids waste launches): a kernel
// launched with grid_for must loop grid-stride, or items past the cap are silently skipped. The
// memory-bound kernels size their grids with resident_grid / occupancy_grid (vector_io.cuh).
inline unsigned int grid_for(int64_t items, int threads_per_block) {
  const int64_t blocks = (items + threads_per_block - 1) / threads_per_block;
  return static_cast<unsigned int>(blocks < 1 ? 1 : (blocks > 65535 * 16 ? 65535 * 16 : blocks));
}

// Calls fn(T{}) with T = float, __nv_bfloat16 or __half for the tensor's dtype: every memory-bound
// kernel is one template over its storage type.
template <typename Fn>
void dispatch_float_type(DType dtype, Fn&& fn) {
  if (dtype == DType::kFloat32) {
    fn(float{});
  } else if (dtype == DType::kBFloat16) {
    fn(__nv_bfloat16{});
  } else {
    GPT_CHECK(dtype == DType::kFloat16) << "expected float32, bfloat16 or float16, got " << dtype_name(dtype);
    fn(__half{});
  }
}

// The dtype of a device storage type.
template <typename T>
constexpr DType device_dtype() {
  if constexpr (std::is_same_v<T, float>) return DType::kFloat32;
  else if constexpr (std::is_same_v<T, __half>) return DType::kFloat16;
  else return DType::kBFloat16;
}

template <typename T>
T* device_data(const Tensor& t) {
  GPT_CHECK(t.dtype() == device_dtype<T>())
      << "tensor " << t.to_string() << " has the wrong dtype for this kernel";
  return static_cast<T*>(t.data());
}
template <typename T>
T* optional_device_data(const Tensor& t) {
  return t.defined() ? device_data<T>(t) : nullptr;
}

}  // namespace gpt::cuda_kernels
