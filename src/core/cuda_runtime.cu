// The CUDA runtime behind core/cuda_runtime.h. Every failing call is fatal with the call, file
// and line (core/cuda_check.h).
#include <cuda_runtime.h>

#include "core/cuda_check.h"
#include "core/cuda_runtime.h"

namespace gpt::cuda {

int device_count() {
  int count = 0;
  // No driver or no device is not an error here: it is how tests learn to skip.
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return count;
}

void set_device(int device) { GPT_CUDA_CHECK(cudaSetDevice(device)); }

std::string device_name(int device) {
  cudaDeviceProp properties{};
  GPT_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.name;
}

void* malloc_device(size_t bytes) {
  void* pointer = nullptr;
  GPT_CUDA_CHECK(cudaMalloc(&pointer, bytes));
  return pointer;
}

void free_device(void* pointer) { GPT_CUDA_CHECK(cudaFree(pointer)); }

void* malloc_pinned_host(size_t bytes) {
  void* pointer = nullptr;
  GPT_CUDA_CHECK(cudaMallocHost(&pointer, bytes));
  return pointer;
}

void free_pinned_host(void* pointer) { GPT_CUDA_CHECK(cudaFreeHost(pointer)); }

void memcpy_sync(void* dst, const void* src, size_t bytes, CopyKind kind) {
  const cudaMemcpyKind cuda_kind = kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
                                   : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                                                     : cudaMemcpyDeviceToDevice;
  GPT_CUDA_CHECK(cudaDeviceSynchronize());
  GPT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cuda_kind));
}

void memset_device(void* pointer, int value, size_t bytes) {
  // Setup-time only (the training step uses ops::zero on its stream): fully synchronous, so it is
  // ordered with work on any stream.
  GPT_CUDA_CHECK(cudaDeviceSynchronize());
  GPT_CUDA_CHECK(cudaMemset(pointer, value, bytes));
  GPT_CUDA_CHECK(cudaDeviceSynchronize());
}

void synchronize_device() { GPT_CUDA_CHECK(cudaDeviceSynchronize()); }

size_t device_memory_used_bytes() {
  size_t free_bytes = 0, total_bytes = 0;
  GPT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes - free_bytes;
}

}  // namespace gpt::cuda
