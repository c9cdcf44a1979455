#include "model/linear.h"

#include <utility>

#include "core/check.h"
#include "core/phase_timer.h"

namespace gpt {
namespace {

// The lease parts of a Linear: the GEMM input [rows, in_l or in], the output gradient
// [rows, out_l or out] and, row-parallel with a bias under sequence parallelism, the local output
// gradient [local_rows, out] the bias sums.
std::vector<std::pair<DType, Shape>> lease_parts(LinearKind kind, const Shape& weight_shape, bool has_bias,
                                                 bool sequence_parallel, DType dtype, int64_t rows,
                                                 int64_t local_rows) {
  GPT_CHECK_EQ(weight_shape.rank(), 2) << "linear weight " << weight_shape.to_string();
  const int64_t out = weight_shape[0], in = weight_shape[1];
  std::vector<std::pair<DType, Shape>> parts = {{dtype, Shape{rows, in}}, {dtype, Shape{rows, out}}};
  if (kind == LinearKind::kRowParallel && has_bias && sequence_parallel) parts.push_back({dtype, Shape{local_rows, out}});
  return parts;
}

}  // namespace

Linear::Linear(std::string name, LinearKind kind, Param& weight, Param* bias, const TensorParallel& tp, int64_t rows,
               int64_t local_rows, int deferral_depth, Arena& arena, Fp8Slot fp8)
    : name_(std::move(name)),
      kind_(kind),
      weight_(weight),
      bias_(bias),
      tp_(tp),
      leases_(name_ + " weight-gradient inputs",
              lease_parts(kind, weight.local_shape, bias != nullptr, tp.sequence_parallel(), weight.dtype, rows,
                          local_rows),
              deferral_depth, arena),
      fp8_(fp8) {}

int64_t Linear::deferral_bytes(LinearKind kind, const Shape& weight_shape, bool has_bias, bool sequence_parallel,
                               DType dtype, int64_t rows, int64_t local_rows, int deferral_depth) {
  return LeaseRing::bytes(lease_parts(kind, weight_shape, has_bias, sequence_parallel, dtype, rows, local_rows),
                          deferral_depth);
}

float Linear::fp8_scale(Context& ctx, const Tensor& t, Fp8Role role, bool split) {
  float amax = 0.0f;
  if (fp8_.scaling->needs_amax()) {
    amax_ = 0.0f;
    const Tensor reduced(&amax_, DType::kFloat32, Shape{1}, Device::kCpu);
    ops::amax(ctx, reduced, t);
    if (split && tp_.size() > 1) tp_.group().all_reduce(ctx, reduced, ReduceOp::kMax);
    if (role != Fp8Role::kWeight && fp8_.context != nullptr && fp8_.context->size() > 1) {
      fp8_.context->all_reduce(ctx, reduced, ReduceOp::kMax);
    }
    amax = amax_;
  }
  return fp8_.scaling->scale(fp8_.layer, fp8_.linear, role, amax);
}

ops::MatmulOptions::Fp8Operands Linear::fp8_operands(Fp8Role a_role, float a_scale, Fp8Role b_role,
                                                     float b_scale) const {
  if (fp8_.scaling == nullptr) return {};
  return {.enabled = true, .a_format = fp8_.scaling->format(a_role), .b_format = fp8_.scaling->format(b_role),
          .a_scale = a_scale, .b_scale = b_scale};
}

void Linear::weight_gemm(Context& ctx, const Tensor& out, const Tensor& a, Fp8Role a_role, bool a_split,
                         ops::MatmulOptions options) {
  if (fp8_.scaling != nullptr) {
    const float a_scale = fp8_scale(ctx, a, a_role, a_split);
    const float w_scale = fp8_scale(ctx, weight_.value, Fp8Role::kWeight, /*split=*/tp_.size() > 1);
    options.fp8 = fp8_operands(a_role, a_scale, Fp8Role::kWeight, w_scale);
  }
  ops::matmul(ctx, out, a, weight_.value, options);
}

Tensor Linear::forward_column(Context& ctx, const Tensor& out, const Tensor& input, const Tensor& gathered,
                              const Tensor& pre_gelu) {
  GPT_CHECK(kind_ == LinearKind::kColumnParallel) << name_ << " is row-parallel";
  const Tensor input_full = tp_.gather_input(ctx, input, gathered);  // [s, b, in]
  weight_gemm(ctx, out, input_full, Fp8Role::kInput, input_split(),
              {.transpose_b = true, .bias = bias(), .pre_gelu = pre_gelu});
  return input_full;
}

Tensor Linear::forward_row(Context& ctx, const Tensor& partial, const Tensor& input, const Tensor& local) {
  GPT_CHECK(kind_ == LinearKind::kRowParallel) << name_ << " is column-parallel";
  weight_gemm(ctx, partial, input, Fp8Role::kInput, input_split(), {.transpose_b = true});  // partial sums [s, b, out]
  return tp_.reduce_output(ctx, partial, local);                                            // [s_l, b, out]
}

Tensor Linear::backward_input_column(Context& ctx, const Tensor& grad_output, const Tensor& input,
                                     const Tensor& gathered, const Tensor& grad_input_full,
                                     const Tensor& grad_input_local, WeightGradTiming timing) {
  GPT_CHECK(kind_ == LinearKind::kColumnParallel) << name_ << " is row-parallel";
  CollectiveHandle regather = tp_.start_gather_input(ctx, input, gathered);
  weight_gemm(ctx, grad_input_full, grad_output, Fp8Role::kGradOutput, grad_output_split(), {});  // [s, b, in]
  Tensor input_full = input;
  if (regather.pending()) {
    const phase_timer::Scope timed(ctx, phase_timer::Phase::kTensorParallelComm);
    regather.wait(ctx);
    input_full = gathered;  // [s, b, in]
  }
  // The weight gradient (or its deferral) after the input gradient's GEMM: they accumulate into
  // different tensors, so the order changes no value.
  record(ctx, {.input = input_full, .grad_output = grad_output, .bias_grad_output = grad_output}, timing);
  return tp_.reduce_input_grad(ctx, grad_input_full, grad_input_local);  // [s_l, b, in]
}

Tensor Linear::backward_input_row(Context& ctx, const Tensor& grad_output, const Tensor& input,
                                  const Tensor& grad_output_full, const Tensor& grad_input, WeightGradTiming timing) {
  GPT_CHECK(kind_ == LinearKind::kRowParallel) << name_ << " is column-parallel";
  const Tensor grad_full = tp_.gather_output_grad(ctx, grad_output, grad_output_full);  // [s, b, out]
  record(ctx, {.input = input, .grad_output = grad_full, .bias_grad_output = grad_output}, timing);
  weight_gemm(ctx, grad_input, grad_full, Fp8Role::kGradOutput, grad_output_split(), {});  // [s b, in_l]
  return grad_input;
}

void Linear::record(Context& ctx, WeightGradInputs inputs, WeightGradTiming timing) {
  if (fp8_.scaling != nullptr && fp8_.scaling->config().weight_gradient) {
    // The casts the weight gradient's GEMM makes: the forward's of the input (the same tensor, so
    // the same amax) and the input gradient's of the output gradient.
    inputs.input_scale = fp8_scale(ctx, inputs.input, Fp8Role::kInput, input_split());
    inputs.grad_output_scale = fp8_scale(ctx, inputs.grad_output, Fp8Role::kGradOutput, grad_output_split());
  }
  if (timing == WeightGradTiming::kWithInputGrad) {
    GPT_CHECK(pending_.empty()) << name_ << ": a fused backward while " << pending_.size()
                                << " deferred weight gradients are pending (they would accumulate out of order)";
    weight_grad(ctx, inputs);
    return;
  }
  // Copies into a lease, before the scratch they live in is reused.
  const std::vector<Tensor>& lease = leases_.acquire();
  const bool separate_bias_rows = inputs.bias_grad_output.data() != inputs.grad_output.data();
  ops::copy(ctx, lease[0], inputs.input);
  ops::copy(ctx, lease[1], inputs.grad_output);
  WeightGradInputs kept{.input = lease[0], .grad_output = lease[1], .bias_grad_output = lease[1], .leased = true,
                        .input_scale = inputs.input_scale, .grad_output_scale = inputs.grad_output_scale};
  if (bias_ && separate_bias_rows) {
    GPT_CHECK_EQ(lease.size(), 3u) << name_ << ": no lease for the bias gradient's rows";
    ops::copy(ctx, lease[2], inputs.bias_grad_output);
    kept.bias_grad_output = lease[2];
  }
  pending_.push_back(kept);
}

void Linear::backward_weight(Context& ctx) {
  GPT_CHECK(!pending_.empty()) << name_ << ": a weight-gradient pass without a deferred input-gradient pass";
  const WeightGradInputs inputs = pending_.front();
  pending_.pop_front();
  weight_grad(ctx, inputs);
  if (inputs.leased) leases_.release(ctx);
}

void Linear::weight_grad(Context& ctx, const WeightGradInputs& inputs) const {
  // Bias first, then the GEMM: the order of today's fused backward (each accumulates into its own
  // parameter, so the order changes no value).
  if (bias_) ops::bias_grad(ctx, bias_->grad, inputs.bias_grad_output);
  ops::MatmulOptions options{.transpose_a = true, .beta = 1.0f};
  if (fp8_.scaling != nullptr && fp8_.scaling->config().weight_gradient) {
    options.fp8 = fp8_operands(Fp8Role::kGradOutput, inputs.grad_output_scale, Fp8Role::kInput, inputs.input_scale);
  }
  ops::matmul(ctx, weight_.grad, inputs.grad_output, inputs.input, options);
}

}  // namespace gpt
