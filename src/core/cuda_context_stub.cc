// CPU-only builds: a GPU context cannot be created.
#include "core/check.h"
#include "core/cuda_context.h"

namespace gpt::cuda {

class DeviceContext {};

std::shared_ptr<DeviceContext> create_device_context(int device_index) {
  GPT_FATAL() << "GPU " << device_index
              << " requested, but this build has no CUDA backend (nvcc was not found at configure time)";
  return nullptr;
}

void synchronize(const DeviceContext&) {}

}  // namespace gpt::cuda
