// The CUDA runtime behind core/cuda_runtime.h. Every failing call is fatal with the call, file
// and line (core/cuda_check.h).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdio>

#include "core/cuda_check.h"
#include "core/cuda_device_context.cuh"
#include "core/cuda_runtime.h"

namespace gpt::cuda {
namespace {

std::atomic<size_t> device_synchronization_count{0};

// Every whole-device wait goes through here, so tests can prove that a training step has none.
void wait_for_device() {
  device_synchronization_count.fetch_add(1, std::memory_order_relaxed);
  GPT_CUDA_CHECK(cudaDeviceSynchronize());
}

cudaMemcpyKind cuda_copy_kind(CopyKind kind) {
  return kind == CopyKind::kHostToDevice   ? cudaMemcpyHostToDevice
         : kind == CopyKind::kDeviceToHost ? cudaMemcpyDeviceToHost
                                           : cudaMemcpyDeviceToDevice;
}

}  // namespace

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

int current_device() {
  int device = 0;
  GPT_CUDA_CHECK(cudaGetDevice(&device));
  return device;
}

std::string device_name(int device) {
  cudaDeviceProp properties{};
  GPT_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.name;
}

std::string device_uuid(int device) {
  cudaDeviceProp properties{};
  GPT_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  std::string hex;
  for (char byte : properties.uuid.bytes) {
    char pair[3];
    std::snprintf(pair, sizeof(pair), "%02x", static_cast<unsigned char>(byte));
    hex += pair;
  }
  return hex;
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
  wait_for_device();
  GPT_CUDA_CHECK(cudaMemcpy(dst, src, bytes, cuda_copy_kind(kind)));
}

void memcpy_on_stream(const DeviceContext& context, void* dst, const void* src, size_t bytes, CopyKind kind) {
  GPT_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cuda_copy_kind(kind), context.stream()));
}

void memset_device(void* pointer, int value, size_t bytes) {
  // Setup-time only (the training step uses ops::zero on its stream): fully synchronous, so it is
  // ordered with work on any stream.
  wait_for_device();
  GPT_CUDA_CHECK(cudaMemset(pointer, value, bytes));
  wait_for_device();
}

void synchronize_device() { wait_for_device(); }

size_t device_synchronizations() { return device_synchronization_count.load(std::memory_order_relaxed); }

size_t device_memory_used_bytes() {
  size_t free_bytes = 0, total_bytes = 0;
  GPT_CUDA_CHECK(cudaMemGetInfo(&free_bytes, &total_bytes));
  return total_bytes - free_bytes;
}

size_t device_memory_total_bytes(int device) {
  cudaDeviceProp properties{};
  GPT_CUDA_CHECK(cudaGetDeviceProperties(&properties, device));
  return properties.totalGlobalMem;
}

}  // namespace gpt::cuda
