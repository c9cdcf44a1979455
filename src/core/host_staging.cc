#include "core/host_staging.h"

#include <utility>

#include "core/cuda_runtime.h"
#include "core/memory.h"

namespace gpt {

HostStaging::~HostStaging() { release(); }

HostStaging::HostStaging(HostStaging&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), bytes_(std::exchange(other.bytes_, 0)), pinned_(other.pinned_) {}

void HostStaging::release() {
  if (data_ == nullptr) return;
  if (pinned_) {
    cuda::free_pinned_host(data_);
  } else {
    free_bytes(Device::kCpu, data_);
  }
  data_ = nullptr;
  bytes_ = 0;
}

void* HostStaging::reserve(size_t bytes) {
  if (bytes <= bytes_ && data_ != nullptr) return data_;
  release();
  pinned_ = cuda::device_count() > 0;
  data_ = pinned_ ? cuda::malloc_pinned_host(bytes) : allocate_bytes(Device::kCpu, bytes);
  bytes_ = bytes;
  return data_;
}

}  // namespace gpt
