// Fatal checks for CUDA runtime calls. Include only from .cu files and src/kernels/cuda.
#pragma once

#include <cuda_runtime.h>

#include "core/check.h"

#define GPT_CUDA_CHECK(call)                                                       \
  do {                                                                             \
    const cudaError_t gpt_cuda_error_ = (call);                                    \
    if (gpt_cuda_error_ != cudaSuccess) {                                          \
      GPT_FATAL() << #call << " failed: " << cudaGetErrorString(gpt_cuda_error_); \
    }                                                                              \
  } while (false)

// After a kernel launch: reports launch-configuration errors at the launch site.
#define GPT_CUDA_CHECK_LAUNCH() GPT_CUDA_CHECK(cudaGetLastError())
