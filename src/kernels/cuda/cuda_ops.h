// The CUDA backend: the same signatures as kernels/ops.h, in namespace gpt::cuda_ops. No CUDA
// headers here, so ops.cc can dispatch to it from plain C++.
#pragma once

#include "kernels/ops.h"

namespace gpt::cuda_ops {

void matmul(Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b, const ops::MatmulOptions& options);
void bias_grad(Context& ctx, const Tensor& dbias, const Tensor& dy);
void layernorm_forward(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                       const Tensor& x, const Tensor& weight, const Tensor& bias, float epsilon);
void residual_layernorm_forward(Context& ctx, const Tensor& residual, const Tensor& y, const Tensor& mean,
                                const Tensor& rstd, const Tensor& x, const Tensor& delta,
                                const Tensor& delta_bias, const Tensor& weight, const Tensor& bias,
                                float epsilon);
void layernorm_backward(Context& ctx, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& weight, bool accumulate_dx);
void residual_add(Context& ctx, const Tensor& out, const Tensor& x, const Tensor& delta, const Tensor& delta_bias);
void gelu_forward(Context& ctx, const Tensor& y, const Tensor& x);
void gelu_backward(Context& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x);
void attention_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, float scale);
void attention_backward(Context& ctx, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& lse, float scale);
void embedding_forward(Context& ctx, const Tensor& out, const Tensor& tokens, const Tensor& table, int64_t vocab_start);
void embedding_backward(Context& ctx, const Tensor& dtable, const Tensor& dout, const Tensor& tokens, int64_t vocab_start);
void position_embedding_forward(Context& ctx, const Tensor& out, const Tensor& table, int64_t batch,
                                int64_t position_offset);
void position_embedding_backward(Context& ctx, const Tensor& dtable, const Tensor& dout, int64_t batch,
                                 int64_t position_offset);
void cross_entropy_stats(Context& ctx, const Tensor& row_max, const Tensor& row_sumexp,
                         const Tensor& target_logit, const Tensor& logits, const Tensor& targets,
                         int64_t vocab_start, int64_t vocab_valid);
void cross_entropy_rescale(Context& ctx, const Tensor& row_sumexp, const Tensor& local_max, const Tensor& global_max);
void cross_entropy_loss(Context& ctx, const Tensor& loss, const Tensor& row_max, const Tensor& row_sumexp,
                        const Tensor& target_logit);
void cross_entropy_backward(Context& ctx, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                            const Tensor& row_max, const Tensor& row_sumexp, float grad_scale,
                            int64_t vocab_start, int64_t vocab_valid);
void adamw_update(Context& ctx, const ops::AdamWStep& step, const Tensor& master, const Tensor& grad,
                  const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& param_out);
void sum_of_squares(Context& ctx, const Tensor& out, const Tensor& x);
void sum(Context& ctx, const Tensor& out, const Tensor& x);
void zero(Context& ctx, const Tensor& x);
void scale(Context& ctx, const Tensor& x, float factor);
void cast(Context& ctx, const Tensor& out, const Tensor& in);

}  // namespace gpt::cuda_ops
