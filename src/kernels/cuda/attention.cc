// ops::attention_forward/backward on the GPU: cuDNN's fused flash attention where it applies and
// the context allows it (KernelOptions::fused_attention), else the exact reference kernels.
// Forward and backward of one layer take the same path (their shapes and options agree), so the
// statistics the backward reads are the ones its own forward wrote.
#include "kernels/cuda/attention_kernels.h"
#include "kernels/cuda/cuda_ops.h"

namespace gpt::cuda_ops {
namespace {

bool use_cudnn(const Context& ctx, const Tensor& qkv) {
  return ctx.options().fused_attention && cudnn_version() > 0 && cudnn_attention_applies(qkv);
}

}  // namespace

void attention_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, float scale) {
  if (use_cudnn(ctx, qkv)) return cudnn_attention_forward(ctx, out, lse, qkv, scale);
  reference_attention_forward(ctx, out, lse, qkv, scale);
}

void attention_backward(Context& ctx, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, float scale) {
  if (use_cudnn(ctx, qkv)) return cudnn_attention_backward(ctx, dqkv, dout, qkv, out, lse, scale);
  reference_attention_backward(ctx, dqkv, dout, qkv, out, lse, scale);
}

}  // namespace gpt::cuda_ops
