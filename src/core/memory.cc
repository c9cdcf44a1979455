#include "core/memory.h"

#include <cstdlib>
#include <cstring>
#include <utility>

#include "core/cuda_runtime.h"

namespace gpt {

bool cuda_backend_built() {
#ifdef GPT_WITH_CUDA
  return true;
#else
  return false;
#endif
}

void* allocate_bytes(Device device, size_t bytes) {
  if (bytes == 0) bytes = kAllocationAlignment;
  if (device == Device::kCuda) return cuda::malloc_device(bytes);
  const size_t rounded = (bytes + kAllocationAlignment - 1) / kAllocationAlignment * kAllocationAlignment;
  void* pointer = std::aligned_alloc(kAllocationAlignment, rounded);
  GPT_CHECK(pointer != nullptr) << "host allocation of " << bytes << " bytes failed";
  return pointer;
}

void free_bytes(Device device, void* pointer) {
  if (pointer == nullptr) return;
  if (device == Device::kCuda) {
    cuda::free_device(pointer);
  } else {
    std::free(pointer);
  }
}

void copy_bytes(Device dst_device, void* dst, Device src_device, const void* src, size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if (dst_device == Device::kCpu && src_device == Device::kCpu) {
    std::memmove(dst, src, bytes);
    return;
  }
  const cuda::CopyKind kind = dst_device == Device::kCpu   ? cuda::CopyKind::kDeviceToHost
                              : src_device == Device::kCpu ? cuda::CopyKind::kHostToDevice
                                                           : cuda::CopyKind::kDeviceToDevice;
  cuda::memcpy_sync(dst, src, bytes, kind);
}

void copy_tensor(const Tensor& dst, const Tensor& src) {
  GPT_CHECK(dst.dtype() == src.dtype() && dst.numel() == src.numel())
      << "copy " << src.to_string() << " into " << dst.to_string();
  copy_bytes(dst.device(), dst.data(), src.device(), src.data(), src.bytes());
}

Buffer::Buffer(Device device, size_t bytes)
    : device_(device), data_(allocate_bytes(device, bytes)), bytes_(bytes) {}

Buffer::~Buffer() { release(); }

Buffer::Buffer(Buffer&& other) noexcept
    : device_(other.device_), data_(std::exchange(other.data_, nullptr)),
      bytes_(std::exchange(other.bytes_, 0)) {}

Buffer& Buffer::operator=(Buffer&& other) noexcept {
  if (this != &other) {
    release();
    device_ = other.device_;
    data_ = std::exchange(other.data_, nullptr);
    bytes_ = std::exchange(other.bytes_, 0);
  }
  return *this;
}

void Buffer::release() {
  free_bytes(device_, data_);
  data_ = nullptr;
  bytes_ = 0;
}

Tensor Buffer::as_tensor(DType dtype, Shape shape) const {
  GPT_CHECK_LE(static_cast<size_t>(shape.numel()) * dtype_size(dtype), bytes_);
  return Tensor(data_, dtype, shape, device_);
}

}  // namespace gpt
