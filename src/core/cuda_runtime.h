// The CUDA runtime seen from the rest of core, without CUDA headers. Implemented in
// cuda_runtime.cu when the CUDA backend is built; otherwise every entry point is fatal except
// device_count(), which reports 0.
#pragma once

#include <cstddef>
#include <string>

#include "core/cuda_context.h"

namespace gpt::cuda {

// Number of visible GPUs (those CUDA_VISIBLE_DEVICES shows, numbered from 0); 0 when none (or
// when the backend is not built).
int device_count();
void set_device(int device);
// The device this thread's CUDA calls go to.
int current_device();
std::string device_name(int device);
// The GPU's UUID in hex: the same physical GPU gives the same text in every process, whatever
// index CUDA_VISIBLE_DEVICES gave it there.
std::string device_uuid(int device);

void* malloc_device(size_t bytes);
void free_device(void* pointer);
void* malloc_pinned_host(size_t bytes);
void free_pinned_host(void* pointer);
enum class CopyKind { kHostToDevice, kDeviceToHost, kDeviceToDevice };
// Set-up only: waits for the whole device first, so it is ordered with work on any stream.
void memcpy_sync(void* dst, const void* src, size_t bytes, CopyKind kind);
// Queued on the context's stream (cudaMemcpyAsync); see core/stream_copy.h for when the host
// memory may be touched again.
void memcpy_on_stream(const DeviceContext& context, void* dst, const void* src, size_t bytes, CopyKind kind);
void memset_device(void* pointer, int value, size_t bytes);
void synchronize_device();
// How many times this process has waited for the whole device (cudaDeviceSynchronize through
// this seam): set-up does, a training step must not. For tests.
size_t device_synchronizations();
// Peak and current device memory reported by the allocator's view (cudaMemGetInfo).
size_t device_memory_used_bytes();
// The GPU's total memory (cudaGetDeviceProperties; needs no context on it). 0 without the backend.
size_t device_memory_total_bytes(int device);

}  // namespace gpt::cuda
