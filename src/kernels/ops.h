// The GPT op set, declared once. Every op takes the Context and non-owning views, and dispatches
// on the context's device: the CPU implementation (kernels/cpu) is the reference, plain C++ with
// FP32 accumulation; the CUDA implementation (kernels/cuda) is the product.
//
// Conventions. Activations are stored in the compute dtype T (float32, or bfloat16 with --bf16);
// every reduction accumulates in FP32 (or wider); gradients of parameters are accumulated (+=) into
// FP32 buffers ("main_grad"). Shapes use s = sequence, b = micro batch, h = hidden, n = s*b rows,
// following Megatron's [s, b, h] activation layout. Tensors of rank > 2 are seen as matrices
// [rows, cols] with all leading dims folded into rows where an op says "matrix".
#pragma once

#include <cstdint>
#include <span>

#include "core/context.h"
#include "core/tensor.h"

namespace gpt::ops {

// ---- GEMM -----------------------------------------------------------------------------------

struct MatmulOptions {
  bool transpose_a = false;
  bool transpose_b = false;
  float alpha = 1.0f;
  float beta = 0.0f;  // out = alpha * op(a) @ op(b) + beta * out
  Tensor bias;        // [n], added after the product when defined (same dtype as out or float32)
  // When defined: out = gelu(product + bias) and pre_gelu receives product + bias.
  Tensor pre_gelu;
};
// out [m, n] = op(a) [m, k] @ op(b) [k, n] (+ bias), all seen as matrices. a and b share a dtype
// (float32 or bfloat16); out may be float32 when they are bfloat16 (weight-gradient accumulation).
void matmul(Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b, const MatmulOptions& options = {});

// dbias [n] (float32) += column sums of dy [rows, n].
void bias_grad(Context& ctx, const Tensor& dbias, const Tensor& dy);

// ---- LayerNorm and residual stream -------------------------------------------------------------

// y = (x - mean) * rstd * weight + bias over the last dim. x, y: [rows, h]; weight, bias: [h];
// mean, rstd: [rows] float32, kept for backward.
void layernorm_forward(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                       const Tensor& x, const Tensor& weight, const Tensor& bias, float epsilon);
// residual = x + delta + delta_bias (delta_bias [h], optional); y = LayerNorm(residual).
void residual_layernorm_forward(Context& ctx, const Tensor& residual, const Tensor& y, const Tensor& mean,
                                const Tensor& rstd, const Tensor& x, const Tensor& delta,
                                const Tensor& delta_bias, const Tensor& weight, const Tensor& bias,
                                float epsilon);
// dx = (or += when accumulate_dx) the input gradient; dweight, dbias [h] float32 +=.
void layernorm_backward(Context& ctx, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& weight, bool accumulate_dx);
// out = x + delta + delta_bias (delta_bias [h], optional). out may alias x or delta.
void residual_add(Context& ctx, const Tensor& out, const Tensor& x, const Tensor& delta, const Tensor& delta_bias);

// ---- Activations --------------------------------------------------------------------------------

// GeLU with the tanh approximation (GPT-2): 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
void gelu_forward(Context& ctx, const Tensor& y, const Tensor& x);
// dx = dy * gelu'(x); dx may alias dy.
void gelu_backward(Context& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x);

// ---- Causal self-attention --------------------------------------------------------------------

// qkv: [s, b, heads, 3 * d] with q, k, v of each head side by side (Megatron's QKV layout, so a
// tensor-parallel split of heads is contiguous). out: [s, b, heads, d]. lse: [b, heads, s] float32,
// the log-sum-exp of each scaled, causally masked score row, kept for backward.
void attention_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, float scale);
// dqkv [s, b, heads, 3d] = gradient of the attention output dout [s, b, heads, d].
void attention_backward(Context& ctx, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& lse, float scale);

// ---- Embeddings ---------------------------------------------------------------------------------

// out [rows, h] = table [v_local, h] row (token - vocab_start) for tokens [rows] (int32) inside
// this shard [vocab_start, vocab_start + v_local), and 0 elsewhere (vocab-parallel embedding).
void embedding_forward(Context& ctx, const Tensor& out, const Tensor& tokens, const Tensor& table, int64_t vocab_start);
// dtable [v_local, h] float32 += dout rows of the tokens in this shard, in row order
// (deterministic).
void embedding_backward(Context& ctx, const Tensor& dtable, const Tensor& dout, const Tensor& tokens, int64_t vocab_start);
// out [s_local * b, h] += table [position_offset + row / b]: learned absolute positions, rows in
// [s, b] order.
void position_embedding_forward(Context& ctx, const Tensor& out, const Tensor& table, int64_t batch,
                                int64_t position_offset);
// dtable [max_positions, h] float32 += the matching rows of dout (summed over the batch).
void position_embedding_backward(Context& ctx, const Tensor& dtable, const Tensor& dout, int64_t batch,
                                 int64_t position_offset);

// ---- Softmax cross-entropy, in the pieces vocab-parallel cross-entropy needs ------------------
//
// logits [rows, v_local] hold this rank's columns [vocab_start, vocab_start + v_local) of the
// padded vocabulary; only the first vocab_valid of them are real tokens, the rest (padding) are
// excluded, so the loss equals that of the unpadded vocabulary. targets [rows] int32 are global ids.

// One pass: row_max [rows] = max over valid columns, row_sumexp = sum exp(logit - row_max),
// target_logit = the target's logit if it is in this shard, else 0. All float32.
void cross_entropy_stats(Context& ctx, const Tensor& row_max, const Tensor& row_sumexp,
                         const Tensor& target_logit, const Tensor& logits, const Tensor& targets,
                         int64_t vocab_start, int64_t vocab_valid);
// Moves this shard's row_sumexp to a common reference: row_sumexp *= exp(local_max - global_max).
void cross_entropy_rescale(Context& ctx, const Tensor& row_sumexp, const Tensor& local_max, const Tensor& global_max);
// loss [rows] = log(row_sumexp) + row_max - target_logit.
void cross_entropy_loss(Context& ctx, const Tensor& loss, const Tensor& row_max, const Tensor& row_sumexp,
                        const Tensor& target_logit);
// dlogits = (softmax - onehot(target)) * grad_scale over valid columns, 0 on padding. dlogits may
// alias logits (Megatron and llm.c overwrite the logits with their gradient).
void cross_entropy_backward(Context& ctx, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                            const Tensor& row_max, const Tensor& row_sumexp, float grad_scale,
                            int64_t vocab_start, int64_t vocab_valid);

// ---- Optimizer and reductions -------------------------------------------------------------------

struct AdamWStep {
  float learning_rate = 0.0f;
  float beta1 = 0.9f;
  float beta2 = 0.999f;
  float epsilon = 1e-8f;
  float weight_decay = 0.0f;
  int64_t step = 1;         // 1-based, for bias correction
  float grad_scale = 1.0f;  // applied to the gradient first (gradient clipping)
};
// Decoupled-weight-decay Adam (Loshchilov & Hutter; torch.optim.AdamW's arithmetic) on FP32
// master weights. master, grad, exp_avg, exp_avg_sq: [n] float32. param_out: the model's copy of
// the parameter ([n] bfloat16, written from the updated master), or undefined when the master is
// itself the parameter (FP32 training).
void adamw_update(Context& ctx, const AdamWStep& step, const Tensor& master, const Tensor& grad,
                  const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& param_out);

// A range of the flat optimizer state for adamw_update_segments.
struct AdamWSegment {
  int64_t offset = 0;         // first element in the flat tensors
  int64_t length = 0;
  bool weight_decay = false;  // step.weight_decay applies (matrices) or not (biases, norms: 0)
};
// adamw_update on each segment of the flat tensors (master, grad, exp_avg, exp_avg_sq: [n] float32;
// param_out: [n] bfloat16 or undefined), each with its own weight decay, in one launch on the GPU
// instead of one per parameter. Bit for bit the same as adamw_update called on every segment's
// flat_range with step.weight_decay or 0. Segments lie inside [0, n) and do not overlap.
void adamw_update_segments(Context& ctx, const AdamWStep& step, const Tensor& master, const Tensor& grad,
                           const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& param_out,
                           std::span<const AdamWSegment> segments);

// out [1] float32 += sum of x^2 (x float32).
void sum_of_squares(Context& ctx, const Tensor& out, const Tensor& x);
// out [1] float32 += sum of x (x float32).
void sum(Context& ctx, const Tensor& out, const Tensor& x);
// Every element of x = 0, ordered with the context's other work.
void zero(Context& ctx, const Tensor& x);
// out = in (same dtype and element count), ordered with the context's other work.
void copy(Context& ctx, const Tensor& out, const Tensor& in);
// x *= factor (float32).
void scale(Context& ctx, const Tensor& x, float factor);
// out = in converted (float32 <-> bfloat16, or a copy when the dtypes match). Shapes may differ
// when element counts agree.
void cast(Context& ctx, const Tensor& out, const Tensor& in);

}  // namespace gpt::ops
