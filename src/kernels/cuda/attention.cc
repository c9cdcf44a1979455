// ops::attention_forward/backward on the GPU: cuDNN's fused flash attention where it applies (no
// grouped-query attention, no attention dropout, BF16 or FP16, supported head sizes) and the context
// allows it (KernelOptions::fused_attention), else the exact reference kernels. Forward and
// backward of one layer take the same path (their shapes, dropout and options agree), so the
// statistics the backward reads are the ones its own forward wrote.
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/cuda_ops.h"

namespace gpt::cuda_ops {
namespace {

bool use_cudnn(const Context& ctx, const Tensor& qkv, const Tensor& out, const ops::DropoutMask& dropout) {
  return ctx.options().fused_attention && cudnn_version() > 0 && cudnn_attention_applies(qkv, out, dropout);
}

}  // namespace

void attention_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, float scale,
                       const ops::DropoutMask& dropout) {
  if (use_cudnn(ctx, qkv, out, dropout)) return cudnn_attention_forward(ctx, out, lse, qkv, scale);
  reference_attention_forward(ctx, out, lse, qkv, scale, dropout);
}

void attention_backward(Context& ctx, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, float scale, const ops::DropoutMask& dropout) {
  if (use_cudnn(ctx, qkv, out, dropout)) return cudnn_attention_backward(ctx, dqkv, dout, qkv, out, lse, scale);
  reference_attention_backward(ctx, dqkv, dout, qkv, out, lse, scale, dropout);
}

}  // namespace gpt::cuda_ops
