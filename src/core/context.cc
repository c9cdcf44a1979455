#include "core/context.h"

#include "core/check.h"
#include "core/cuda_context.h"

namespace gpt {

Context Context::cpu(int cpu_threads) {
  Context context;
  context.device_ = Device::kCpu;
  context.cpu_threads_ = cpu_threads < 1 ? 1 : cpu_threads;
  return context;
}

Context Context::gpu(int device_index) {
  Context context;
  context.device_ = Device::kCuda;
  context.cuda_ = cuda::create_device_context(device_index);
  return context;
}

cuda::DeviceContext& Context::cuda() const {
  GPT_CHECK(cuda_ != nullptr) << "CUDA context requested on a " << device_name(device_) << " context";
  return *cuda_;
}

float* Context::cpu_scratch(int slot, size_t count) {
  GPT_CHECK(slot >= 0 && slot < kScratchSlots) << "scratch slot " << slot;
  std::vector<float>& scratch = scratch_[slot];
  if (scratch.size() < count) scratch.resize(count);
  return scratch.data();
}

void Context::synchronize() const {
  if (cuda_) cuda::synchronize(*cuda_);
}

}  // namespace gpt
