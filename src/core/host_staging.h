// A grow-once host buffer for moving device data through the host (MPI collectives on GPU
// tensors, checkpoint I/O). Page-locked (cudaMallocHost) when a GPU is present, so copies run at
// full PCIe bandwidth; ordinary aligned memory otherwise.
#pragma once

#include <cstddef>

namespace gpt {

class HostStaging {
 public:
  HostStaging() = default;
  ~HostStaging();
  HostStaging(const HostStaging&) = delete;
  HostStaging& operator=(const HostStaging&) = delete;
  HostStaging(HostStaging&& other) noexcept;
  HostStaging& operator=(HostStaging&&) = delete;

  // At least `bytes` bytes; reallocates only when a larger size is first asked for.
  void* reserve(size_t bytes);
  // Bytes reserved so far.
  size_t capacity() const { return bytes_; }

 private:
  void release();
  void* data_ = nullptr;
  size_t bytes_ = 0;
  bool pinned_ = false;
};

}  // namespace gpt
