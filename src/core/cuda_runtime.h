// The CUDA runtime seen from the rest of core, without CUDA headers. Implemented in
// cuda_runtime.cu when the CUDA backend is built; otherwise every entry point is fatal except
// cuda_device_count(), which reports 0.
#pragma once

#include <cstddef>
#include <string>

namespace gpt::cuda {

// Number of visible GPUs; 0 when none (or when the backend is not built).
int device_count();
void set_device(int device);
std::string device_name(int device);

void* malloc_device(size_t bytes);
void free_device(void* pointer);
void* malloc_pinned_host(size_t bytes);
void free_pinned_host(void* pointer);
enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
void memcpy_sync(void* dst, const void* src, size_t bytes, CopyKind kind);
void memset_device(void* pointer, int value, size_t bytes);
void synchronize_device();
// Peak and current device memory reported by the allocator's view (cudaMemGetInfo).
size_t device_memory_used_bytes();

}  // namespace gpt::cuda
