// Everything an op needs besides its tensors: the device, and on the CPU a grow-once scratch area
// used to widen BF16 operands for BLAS; on the GPU the stream, library handles and workspace
// (held by core/cuda_context, opaque here so that no CUDA header leaks out of core).
#pragma once

#include <cstddef>
#include <memory>
#include <vector>

#include "core/dtype.h"

namespace gpt {

namespace cuda {
class DeviceContext;
}

// Choices that change which kernels run, never what they compute (beyond rounding).
struct KernelOptions {
  // Only algorithms whose results are bitwise reproducible run to run (Megatron's
  // --deterministic-mode): on the GPU, cuDNN attention's backward without atomics.
  bool deterministic = false;
  // Attention through cuDNN's fused flash attention where it applies (BF16 or FP16, head dim a multiple
  // of 8 up to 128); otherwise, or when false, the exact reference kernel.
  bool fused_attention = true;
};

class Context {
 public:
  // CPU backend. `cpu_threads` is the number of BLAS threads this process may use.
  static Context cpu(int cpu_threads);
  // CUDA backend on GPU `device_index` (fatal if the backend is not built).
  static Context gpu(int device_index);

  Device device() const { return device_; }
  int cpu_threads() const { return cpu_threads_; }
  cuda::DeviceContext& cuda() const;
  const KernelOptions& options() const { return options_; }
  void set_options(const KernelOptions& options) { options_ = options; }

  // FP32 scratch on the host, `slot` in [0, kScratchSlots). Grows on first use to the largest size
  // requested and is reused afterwards, so steady-state steps do not allocate.
  static constexpr int kScratchSlots = 4;
  float* cpu_scratch(int slot, size_t count);

  // Waits for all work queued on this context (no-op on the CPU).
  void synchronize() const;

 private:
  Device device_ = Device::kCpu;
  int cpu_threads_ = 1;
  KernelOptions options_;
  std::shared_ptr<cuda::DeviceContext> cuda_;
  std::vector<float> scratch_[kScratchSlots];
};

}  // namespace gpt
