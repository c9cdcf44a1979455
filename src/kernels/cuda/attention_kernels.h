// The two GPU implementations behind ops::attention_forward/backward (same signatures and layout,
// see kernels/ops.h): cuDNN's fused flash attention and the exact reference kernels.
// attention.cc picks one per call.
#pragma once

#include "core/context.h"
#include "core/tensor.h"

namespace gpt::cuda_ops {

// Exact causal attention with FP32 math (attention_reference.cu). Any dtype and head size.
void reference_attention_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, float scale);
void reference_attention_backward(Context& ctx, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                  const Tensor& out, const Tensor& lse, float scale);

// cuDNN's fused flash attention (attention_cudnn.cc), when this build has cuDNN.
// True when it applies to qkv [s, b, heads, 3d]: BF16, d a multiple of 8 and at most 128.
bool cudnn_attention_applies(const Tensor& qkv);
void cudnn_attention_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, float scale);
void cudnn_attention_backward(Context& ctx, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, float scale);
// cuDNN's version (cudnnGetVersion, e.g. 91900), 0 without cuDNN.
int cudnn_version();

}  // namespace gpt::cuda_ops
