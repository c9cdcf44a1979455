// Raw memory on a device. The CPU path is aligned host memory; the CUDA path goes through
// core/cuda_runtime.h, which is only linked when the CUDA backend is built.
#pragma once

#include <cstddef>

#include "core/dtype.h"
#include "core/tensor.h"

namespace gpt {

// 256-byte alignment: enough for 16-byte vector loads and for cuBLASLt's preferred alignment.
constexpr size_t kAllocationAlignment = 256;

void* allocate_bytes(Device device, size_t bytes);
void free_bytes(Device device, void* pointer);

// Synchronous copy between any two devices (host <-> host, host <-> GPU, GPU <-> GPU). Waits for
// the whole device first: for set-up; the training step copies with core/stream_copy.h.
void copy_bytes(Device dst_device, void* dst, Device src_device, const void* src, size_t bytes);
// Copies src into dst; shapes may differ but element counts and dtypes must match.
void copy_tensor(const Tensor& dst, const Tensor& src);

bool cuda_backend_built();

// Owning, move-only allocation.
class Buffer {
 public:
  Buffer() = default;
  Buffer(Device device, size_t bytes);
  ~Buffer();
  Buffer(Buffer&& other) noexcept;
  Buffer& operator=(Buffer&& other) noexcept;
  Buffer(const Buffer&) = delete;
  Buffer& operator=(const Buffer&) = delete;

  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return device_; }
  Tensor as_tensor(DType dtype, Shape shape) const;

 private:
  void release();
  Device device_ = Device::kCpu;
  void* data_ = nullptr;
  size_t bytes_ = 0;
};

}  // namespace gpt
