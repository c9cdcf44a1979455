#include "core/cuda_check.h"
#include "core/cuda_device_context.cuh"

namespace gpt::cuda {

DeviceContext::DeviceContext(int device_index) : device_index_(device_index) {
  GPT_CUDA_CHECK(cudaSetDevice(device_index));
  GPT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  GPT_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessor_count_, cudaDevAttrMultiProcessorCount, device_index));
}

DeviceContext::~DeviceContext() {
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

std::shared_ptr<DeviceContext> create_device_context(int device_index) {
  return std::make_shared<DeviceContext>(device_index);
}

void synchronize(const DeviceContext& context) { GPT_CUDA_CHECK(cudaStreamSynchronize(context.stream())); }

}  // namespace gpt::cuda
