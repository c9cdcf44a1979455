// Definition of the GPU context, for CUDA code only (src/core/*.cu and src/kernels/cuda).
#pragma once

#include <cuda_runtime.h>

#include "core/cuda_context.h"

namespace gpt::cuda {

class DeviceContext {
 public:
  explicit DeviceContext(int device_index);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device_index() const { return device_index_; }
  cudaStream_t stream() const { return stream_; }
  int multiprocessor_count() const { return multiprocessor_count_; }

 private:
  int device_index_;
  cudaStream_t stream_ = nullptr;
  int multiprocessor_count_ = 0;
};

}  // namespace gpt::cuda
