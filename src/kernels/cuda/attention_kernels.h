// The two GPU implementations behind ops::attention_forward/backward (same layout, see
// kernels/op_list.inc): cuDNN's fused flash attention and the exact reference kernels.
// attention.cc picks one per call.
#pragma once

#include "core/context.h"
#include "core/tensor.h"
#include "kernels/dropout_mask.h"

namespace gpt::cuda_ops {

// Exact causal attention with FP32 math (attention_reference.cu): any dtype and head size,
// grouped-query attention (qkv [s, b, groups, (q + 2) d]) and attention dropout.
void reference_attention_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, float scale,
                                 const ops::DropoutMask& dropout);
void reference_attention_backward(Context& ctx, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                  const Tensor& out, const Tensor& lse, float scale, const ops::DropoutMask& dropout);

// cuDNN's fused flash attention (attention_cudnn.cc), when this build has cuDNN.
// True when it applies to qkv and out: one query head per key/value group (q = 1, so qkv is
// [s, b, heads, 3d] and out [s, b, heads, d]), no attention dropout, BF16 or FP16, d a multiple of 8 and
// at most 128. The cuDNN functions below take only such operands (no dropout argument).
bool cudnn_attention_applies(const Tensor& qkv, const Tensor& out, const ops::DropoutMask& dropout);
void cudnn_attention_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, float scale);
void cudnn_attention_backward(Context& ctx, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, float scale);
// cuDNN's version (cudnnGetVersion, e.g. 91900), 0 without cuDNN.
int cudnn_version();

}  // namespace gpt::cuda_ops
