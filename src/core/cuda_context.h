// The GPU half of Context: one CUDA stream per process plus the library handles and workspace the
// CUDA kernels use. The class is defined in cuda_context.cu; outside CUDA code it is opaque.
#pragma once

#include <memory>

namespace gpt::cuda {

class DeviceContext;

// Selects GPU `device_index` and creates its stream and handles.
std::shared_ptr<DeviceContext> create_device_context(int device_index);
void synchronize(const DeviceContext& context);

}  // namespace gpt::cuda
