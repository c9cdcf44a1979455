// Device dispatch for the op set. Each op checks that its tensors live on the context's device and
// forwards to the backend; the CUDA backend joins here when it is built (kernels/cuda).
#include "kernels/ops.h"

#include <algorithm>
#include <initializer_list>
#include <utility>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/op_profile.h"
#ifdef GPT_WITH_CUDA
#include "kernels/cuda/cuda_ops.h"
#endif

namespace gpt::ops {
namespace {

void check_devices(const Context& ctx, const char* op, std::initializer_list<const Tensor*> tensors) {
  for (const Tensor* t : tensors) {
    if (t->defined()) {
      GPT_CHECK(t->device() == ctx.device())
          << op << ": " << t->to_string() << " on a " << device_name(ctx.device()) << " context";
    }
  }
}

}  // namespace

#ifdef GPT_WITH_CUDA
#define GPT_CUDA_BRANCH(op, ...)                                  \
  if (ctx.device() == Device::kCuda) return cuda_ops::op(ctx, __VA_ARGS__)
#else
#define GPT_CUDA_BRANCH(op, ...) \
  GPT_CHECK(ctx.device() == Device::kCpu) << #op << ": this build has no CUDA backend"
#endif

// `label` names the op in the per-op profile (kernels/op_profile.h).
#define GPT_DISPATCH_AS(label, op, tensors, ...)    \
  check_devices(ctx, #op, tensors);                 \
  op_profile::Scope gpt_profile_scope_(ctx, label); \
  GPT_CUDA_BRANCH(op, __VA_ARGS__);                 \
  cpu::op(ctx, __VA_ARGS__)
#define GPT_DISPATCH(op, tensors, ...) GPT_DISPATCH_AS(#op, op, tensors, __VA_ARGS__)

namespace {
// The role of a GEMM in a linear layer, by its transposes (the model computes x W^T forward,
// dY W for the input gradient and dY^T x for the weight gradient).
const char* matmul_label(const MatmulOptions& options) {
  if (options.transpose_a) return "matmul (weight gradient)";
  return options.transpose_b ? "matmul (forward)" : "matmul (input gradient)";
}
}  // namespace

void matmul(Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b, const MatmulOptions& options) {
  GPT_DISPATCH_AS(matmul_label(options), matmul,
                  (std::initializer_list<const Tensor*>{&out, &a, &b, &options.bias, &options.pre_gelu}), out, a, b,
                  options);
}

void bias_grad(Context& ctx, const Tensor& dbias, const Tensor& dy) {
  GPT_DISPATCH(bias_grad, (std::initializer_list<const Tensor*>{&dbias, &dy}), dbias, dy);
}

void layernorm_forward(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, float epsilon) {
  GPT_DISPATCH(layernorm_forward, (std::initializer_list<const Tensor*>{&y, &mean, &rstd, &x, &weight, &bias}),
               y, mean, rstd, x, weight, bias, epsilon);
}

void residual_layernorm_forward(Context& ctx, const Tensor& residual, const Tensor& y, const Tensor& mean,
                                const Tensor& rstd, const Tensor& x, const Tensor& delta,
                                const Tensor& delta_bias, const Tensor& weight, const Tensor& bias,
                                float epsilon) {
  GPT_DISPATCH(residual_layernorm_forward,
               (std::initializer_list<const Tensor*>{&residual, &y, &mean, &rstd, &x, &delta, &delta_bias, &weight, &bias}),
               residual, y, mean, rstd, x, delta, delta_bias, weight, bias, epsilon);
}

void layernorm_backward(Context& ctx, const Tensor& dx, const Tensor& dweight, const Tensor& dbias,
                        const Tensor& dy, const Tensor& x, const Tensor& mean, const Tensor& rstd,
                        const Tensor& weight, bool accumulate_dx) {
  GPT_DISPATCH(layernorm_backward,
               (std::initializer_list<const Tensor*>{&dx, &dweight, &dbias, &dy, &x, &mean, &rstd, &weight}),
               dx, dweight, dbias, dy, x, mean, rstd, weight, accumulate_dx);
}

void residual_add(Context& ctx, const Tensor& out, const Tensor& x, const Tensor& delta, const Tensor& delta_bias) {
  GPT_DISPATCH(residual_add, (std::initializer_list<const Tensor*>{&out, &x, &delta, &delta_bias}), out, x, delta,
               delta_bias);
}

void gelu_forward(Context& ctx, const Tensor& y, const Tensor& x) {
  GPT_DISPATCH(gelu_forward, (std::initializer_list<const Tensor*>{&y, &x}), y, x);
}

void gelu_backward(Context& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x) {
  GPT_DISPATCH(gelu_backward, (std::initializer_list<const Tensor*>{&dx, &dy, &x}), dx, dy, x);
}

void attention_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, float scale) {
  GPT_DISPATCH(attention_forward, (std::initializer_list<const Tensor*>{&out, &lse, &qkv}), out, lse, qkv, scale);
}

void attention_backward(Context& ctx, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv, const Tensor& out,
                        const Tensor& lse, float scale) {
  GPT_DISPATCH(attention_backward, (std::initializer_list<const Tensor*>{&dqkv, &dout, &qkv, &out, &lse}), dqkv,
               dout, qkv, out, lse, scale);
}

void embedding_forward(Context& ctx, const Tensor& out, const Tensor& tokens, const Tensor& table, int64_t vocab_start) {
  GPT_DISPATCH(embedding_forward, (std::initializer_list<const Tensor*>{&out, &tokens, &table}), out, tokens, table,
               vocab_start);
}

void embedding_backward(Context& ctx, const Tensor& dtable, const Tensor& dout, const Tensor& tokens,
                        int64_t vocab_start) {
  GPT_DISPATCH(embedding_backward, (std::initializer_list<const Tensor*>{&dtable, &dout, &tokens}), dtable, dout,
               tokens, vocab_start);
}

void position_embedding_forward(Context& ctx, const Tensor& out, const Tensor& table, int64_t batch,
                                int64_t position_offset) {
  GPT_DISPATCH(position_embedding_forward, (std::initializer_list<const Tensor*>{&out, &table}), out, table, batch,
               position_offset);
}

void position_embedding_backward(Context& ctx, const Tensor& dtable, const Tensor& dout, int64_t batch,
                                 int64_t position_offset) {
  GPT_DISPATCH(position_embedding_backward, (std::initializer_list<const Tensor*>{&dtable, &dout}), dtable, dout,
               batch, position_offset);
}

void cross_entropy_stats(Context& ctx, const Tensor& row_max, const Tensor& row_sumexp, const Tensor& target_logit,
                         const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid) {
  GPT_DISPATCH(cross_entropy_stats,
               (std::initializer_list<const Tensor*>{&row_max, &row_sumexp, &target_logit, &logits, &targets}),
               row_max, row_sumexp, target_logit, logits, targets, vocab_start, vocab_valid);
}

void cross_entropy_rescale(Context& ctx, const Tensor& row_sumexp, const Tensor& local_max, const Tensor& global_max) {
  GPT_DISPATCH(cross_entropy_rescale, (std::initializer_list<const Tensor*>{&row_sumexp, &local_max, &global_max}),
               row_sumexp, local_max, global_max);
}

void cross_entropy_loss(Context& ctx, const Tensor& loss, const Tensor& row_max, const Tensor& row_sumexp,
                        const Tensor& target_logit) {
  GPT_DISPATCH(cross_entropy_loss, (std::initializer_list<const Tensor*>{&loss, &row_max, &row_sumexp, &target_logit}),
               loss, row_max, row_sumexp, target_logit);
}

void cross_entropy_backward(Context& ctx, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                            const Tensor& row_max, const Tensor& row_sumexp, float grad_scale, int64_t vocab_start,
                            int64_t vocab_valid) {
  GPT_DISPATCH(cross_entropy_backward,
               (std::initializer_list<const Tensor*>{&dlogits, &logits, &targets, &row_max, &row_sumexp}), dlogits,
               logits, targets, row_max, row_sumexp, grad_scale, vocab_start, vocab_valid);
}

void adamw_update(Context& ctx, const AdamWStep& step, const Tensor& master, const Tensor& grad,
                  const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& param_out) {
  GPT_DISPATCH(adamw_update, (std::initializer_list<const Tensor*>{&master, &grad, &exp_avg, &exp_avg_sq, &param_out}),
               step, master, grad, exp_avg, exp_avg_sq, param_out);
}

void adamw_update_segments(Context& ctx, const AdamWStep& step, const Tensor& master, const Tensor& grad,
                           const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& param_out,
                           std::span<const AdamWSegment> segments) {
  const int64_t n = master.numel();
  GPT_CHECK(master.dtype() == DType::kFloat32 && grad.dtype() == DType::kFloat32 &&
            exp_avg.dtype() == DType::kFloat32 && exp_avg_sq.dtype() == DType::kFloat32)
      << "adamw_update_segments: the optimizer state is float32";
  GPT_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n) << "adamw_update_segments sizes";
  GPT_CHECK(!param_out.defined() || (param_out.numel() == n && param_out.dtype() == DType::kBFloat16))
      << "adamw_update_segments parameter copy " << param_out.to_string();
  // In bounds and disjoint: an overlap would update some elements twice, in an undefined order.
  std::vector<std::pair<int64_t, int64_t>> ranges;
  ranges.reserve(segments.size());
  for (const AdamWSegment& s : segments) {
    GPT_CHECK(s.offset >= 0 && s.length >= 0 && s.offset + s.length <= n)
        << "adamw segment [" << s.offset << ", " << s.offset + s.length << ") outside [0, " << n << ")";
    ranges.emplace_back(s.offset, s.offset + s.length);
  }
  std::sort(ranges.begin(), ranges.end());
  for (size_t i = 1; i < ranges.size(); ++i) {
    GPT_CHECK(ranges[i].first >= ranges[i - 1].second)
        << "adamw segments overlap at [" << ranges[i].first << ", " << ranges[i - 1].second << ")";
  }
  GPT_DISPATCH(adamw_update_segments,
               (std::initializer_list<const Tensor*>{&master, &grad, &exp_avg, &exp_avg_sq, &param_out}), step, master,
               grad, exp_avg, exp_avg_sq, param_out, segments);
}

void sum_of_squares(Context& ctx, const Tensor& out, const Tensor& x) {
  GPT_DISPATCH(sum_of_squares, (std::initializer_list<const Tensor*>{&out, &x}), out, x);
}

void sum(Context& ctx, const Tensor& out, const Tensor& x) {
  GPT_DISPATCH(sum, (std::initializer_list<const Tensor*>{&out, &x}), out, x);
}

void zero(Context& ctx, const Tensor& x) {
  GPT_DISPATCH(zero, (std::initializer_list<const Tensor*>{&x}), x);
}

void copy(Context& ctx, const Tensor& out, const Tensor& in) {
  GPT_DISPATCH(copy, (std::initializer_list<const Tensor*>{&out, &in}), out, in);
}

void scale(Context& ctx, const Tensor& x, float factor) {
  GPT_DISPATCH(scale, (std::initializer_list<const Tensor*>{&x}), x, factor);
}

void cast(Context& ctx, const Tensor& out, const Tensor& in) {
  GPT_DISPATCH(cast, (std::initializer_list<const Tensor*>{&out, &in}), out, in);
}

#undef GPT_DISPATCH

}  // namespace gpt::ops
