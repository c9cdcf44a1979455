// Definition of the GPU context, for CUDA code only (src/core/*.cu and src/kernels/cuda).
#pragma once

#include <cublasLt.h>
#include <cuda_runtime.h>

#include <cstddef>
#include <map>
#include <memory>
#include <string>

#include "core/cuda_context.h"

namespace gpt::cuda {

class DeviceContext {
 public:
  explicit DeviceContext(int device_index);
  ~DeviceContext();
  DeviceContext(const DeviceContext&) = delete;
  DeviceContext& operator=(const DeviceContext&) = delete;

  int device_index() const { return device_index_; }
  cudaStream_t stream() const { return stream_; }
  int multiprocessor_count() const { return multiprocessor_count_; }
  cublasLtHandle_t cublaslt() const { return cublaslt_; }

  // cuBLASLt's workspace (kGemmWorkspaceBytes), reserved for GEMMs.
  void* gemm_workspace() const { return gemm_workspace_; }
  static constexpr size_t kGemmWorkspaceBytes = size_t{32} << 20;
  // Scratch for kernels with a second reduction pass (column sums, norms, the embedding sort).
  // Allocated once; an op needing more than kScratchBytes is a fatal error naming the op.
  void* scratch(size_t bytes, const char* op) const;
  static constexpr size_t kScratchBytes = size_t{256} << 20;

  // State an op keeps between calls on this context (library handles, plans cached per shape),
  // created by the op on first use and destroyed with the context, before the stream.
  std::shared_ptr<void>& op_state(const std::string& key) { return op_state_[key]; }

 private:
  int device_index_;
  cudaStream_t stream_ = nullptr;
  int multiprocessor_count_ = 0;
  cublasLtHandle_t cublaslt_ = nullptr;
  void* gemm_workspace_ = nullptr;
  void* scratch_ = nullptr;
  std::map<std::string, std::shared_ptr<void>> op_state_;
};

}  // namespace gpt::cuda
