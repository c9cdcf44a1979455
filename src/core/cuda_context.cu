#include "core/cuda_check.h"
#include "core/cuda_device_context.cuh"

namespace gpt::cuda {

DeviceContext::DeviceContext(int device_index) : device_index_(device_index) {
  GPT_CUDA_CHECK(cudaSetDevice(device_index));
  GPT_CUDA_CHECK(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking));
  GPT_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessor_count_, cudaDevAttrMultiProcessorCount, device_index));
  GPT_CHECK(cublasLtCreate(&cublaslt_) == CUBLAS_STATUS_SUCCESS) << "cublasLtCreate on GPU " << device_index;
  GPT_CUDA_CHECK(cudaMalloc(&gemm_workspace_, kGemmWorkspaceBytes));
  GPT_CUDA_CHECK(cudaMalloc(&scratch_, kScratchBytes));
}

DeviceContext::~DeviceContext() {
  if (stream_ != nullptr) cudaStreamSynchronize(stream_);
  op_state_.clear();
  if (cublaslt_ != nullptr) cublasLtDestroy(cublaslt_);
  cudaFree(gemm_workspace_);
  cudaFree(scratch_);
  if (stream_ != nullptr) cudaStreamDestroy(stream_);
}

void* DeviceContext::scratch(size_t bytes, const char* op) const {
  GPT_CHECK_LE(bytes, kScratchBytes) << op << " needs " << bytes << " bytes of GPU scratch";
  return scratch_;
}

std::shared_ptr<DeviceContext> create_device_context(int device_index) {
  return std::make_shared<DeviceContext>(device_index);
}

void synchronize(const DeviceContext& context) { GPT_CUDA_CHECK(cudaStreamSynchronize(context.stream())); }

}  // namespace gpt::cuda
