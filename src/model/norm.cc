#include "model/norm.h"

#include "kernels/ops.h"

namespace gpt {

Norm::Norm(const ModelConfig& config, ParamStore& params, const std::string& prefix)
    : kind_(config.normalization),
      epsilon_(config.layernorm_epsilon),
      weight_(params.get(prefix + ".weight")),
      bias_(config.has_layernorm_bias() ? &params.get(prefix + ".bias") : nullptr),
      weight_offset_(config.layernorm_zero_centered_gamma ? 1.0f : 0.0f) {}

NormForward NormForward::of(const ModelConfig& config, const Tensor& weight, const Tensor& bias) {
  return {.kind = config.normalization,
          .epsilon = config.layernorm_epsilon,
          .weight_offset = config.layernorm_zero_centered_gamma ? 1.0f : 0.0f,
          .weight = weight,
          .bias = config.has_layernorm_bias() ? bias : Tensor()};
}

void NormForward::forward(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                          const Tensor& x) const {
  if (kind == Normalization::kRMSNorm) {
    ops::rmsnorm_forward(ctx, y, rstd, x, weight, epsilon, weight_offset);
  } else {
    ops::layernorm_forward(ctx, y, mean, rstd, x, weight, bias, epsilon, weight_offset);
  }
}

void NormForward::residual_forward(Context& ctx, const Tensor& residual, const Tensor& y, const Tensor& mean,
                                   const Tensor& rstd, const Tensor& x, const Tensor& delta,
                                   const Tensor& delta_bias) const {
  if (kind == Normalization::kRMSNorm) {
    ops::residual_rmsnorm_forward(ctx, residual, y, rstd, x, delta, delta_bias, weight, epsilon, weight_offset);
  } else {
    ops::residual_layernorm_forward(ctx, residual, y, mean, rstd, x, delta, delta_bias, weight, bias, epsilon,
                                    weight_offset);
  }
}

NormForward Norm::forward_op() const {
  return {.kind = kind_,
          .epsilon = epsilon_,
          .weight_offset = weight_offset_,
          .weight = weight_.value,
          .bias = bias_ ? bias_->value : Tensor()};
}

void Norm::forward(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x) const {
  forward_op().forward(ctx, y, mean, rstd, x);
}

void Norm::residual_forward(Context& ctx, const Tensor& residual, const Tensor& y, const Tensor& mean,
                            const Tensor& rstd, const Tensor& x, const Tensor& delta, const Tensor& delta_bias) const {
  forward_op().residual_forward(ctx, residual, y, mean, rstd, x, delta, delta_bias);
}

void Norm::backward(Context& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                    const Tensor& rstd) const {
  if (kind_ == Normalization::kRMSNorm) {
    ops::rmsnorm_backward(ctx, dx, weight_.grad, dy, x, rstd, weight_.value, /*accumulate_dx=*/false, weight_offset_);
  } else {
    ops::layernorm_backward(ctx, dx, weight_.grad, bias_->grad, dy, x, mean, rstd, weight_.value,
                            /*accumulate_dx=*/false, weight_offset_);
  }
}

}  // namespace gpt
