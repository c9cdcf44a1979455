#include "core/arena.h"

#include <algorithm>
#include <cstring>

#include "core/cuda_runtime.h"

namespace gpt {

Arena::Arena(Device device, std::string name, size_t block_bytes)
    : device_(device), name_(std::move(name)), block_bytes_(block_bytes) {}

int64_t Arena::aligned_bytes(DType dtype, const Shape& shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * dtype_size(dtype);
  return static_cast<int64_t>((bytes + kAllocationAlignment - 1) / kAllocationAlignment * kAllocationAlignment);
}

Tensor Arena::allocate(DType dtype, Shape shape) {
  GPT_CHECK(!frozen_) << "allocation of " << shape.to_string() << " from arena '" << name_
                      << "' after it was frozen (no allocation inside the training step)";
  const auto rounded = static_cast<size_t>(aligned_bytes(dtype, shape));
  if (blocks_.empty() || offset_in_block_ + rounded > blocks_.back().bytes()) {
    blocks_.emplace_back(device_, std::max(block_bytes_, rounded));
    offset_in_block_ = 0;
  }
  void* pointer = static_cast<char*>(blocks_.back().data()) + offset_in_block_;
  offset_in_block_ += rounded;
  used_bytes_ += rounded;
  ++allocations_;
  return Tensor(pointer, dtype, shape, device_);
}

Tensor Arena::allocate_zeroed(DType dtype, Shape shape) {
  Tensor tensor = allocate(dtype, shape);
  zero_tensor(tensor);
  return tensor;
}

size_t Arena::reserved_bytes() const {
  size_t total = 0;
  for (const Buffer& block : blocks_) total += block.bytes();
  return total;
}

void zero_tensor(const Tensor& tensor) {
  if (!tensor.defined() || tensor.numel() == 0) return;
  if (tensor.device() == Device::kCuda) {
    cuda::memset_device(tensor.data(), 0, tensor.bytes());
  } else {
    std::memset(tensor.data(), 0, tensor.bytes());
  }
}

}  // namespace gpt
