// Builds without cuDNN: the fused attention never applies and the reference kernels run.
#include "core/check.h"
#include "kernels/cuda/attention_kernels.h"

namespace gpt::cuda_ops {

int cudnn_version() { return 0; }
bool cudnn_attention_applies(const Tensor&, const Tensor&, const ops::DropoutMask&) { return false; }

void cudnn_attention_forward(Context&, const Tensor&, const Tensor&, const Tensor&, float) {
  GPT_FATAL() << "cuDNN attention requested in a build without cuDNN";
}

void cudnn_attention_backward(Context&, const Tensor&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                              float) {
  GPT_FATAL() << "cuDNN attention requested in a build without cuDNN";
}

}  // namespace gpt::cuda_ops
