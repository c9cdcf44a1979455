// Bump allocator for tensors that live for the whole run: parameters, gradients, activation
// stashes, communication and workspace buffers. Every allocation happens while the model and the
// optimizer are built; freeze() then turns any further allocation into a fatal error, which is
// how "nothing allocates device memory inside the training step" is enforced.
#pragma once

#include <string>
#include <vector>

#include "core/memory.h"
#include "core/tensor.h"

namespace gpt {

class Arena {
 public:
  // Memory is taken from the device in blocks of at least `block_bytes`.
  Arena(Device device, std::string name, size_t block_bytes = size_t{64} << 20);

  Tensor allocate(DType dtype, Shape shape);
  // What allocate(dtype, shape) takes: the tensor's bytes rounded up to the allocation alignment.
  static int64_t aligned_bytes(DType dtype, const Shape& shape);
  // Allocation whose contents are zero-filled (host arenas) or memset on the device.
  Tensor allocate_zeroed(DType dtype, Shape shape);

  void freeze() { frozen_ = true; }
  bool frozen() const { return frozen_; }
  Device device() const { return device_; }
  // Bytes handed out so far, and bytes reserved from the device.
  size_t used_bytes() const { return used_bytes_; }
  size_t reserved_bytes() const;
  // Tensors handed out so far.
  size_t allocations() const { return allocations_; }

 private:
  Device device_;
  std::string name_;
  size_t block_bytes_;
  std::vector<Buffer> blocks_;
  size_t offset_in_block_ = 0;
  size_t used_bytes_ = 0;
  size_t allocations_ = 0;
  bool frozen_ = false;
};

// Sets every byte of a tensor to zero on its device, synchronously (for setup; inside the training
// step use ops::zero, which is ordered on the context's stream).
void zero_tensor(const Tensor& tensor);

}  // namespace gpt
