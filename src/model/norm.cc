#include "model/norm.h"

#include "kernels/ops.h"

namespace gpt {

Norm::Norm(const ModelConfig& config, ParamStore& params, const std::string& prefix)
    : kind_(config.normalization),
      epsilon_(config.layernorm_epsilon),
      weight_(params.get(prefix + ".weight")),
      bias_(config.has_layernorm_bias() ? &params.get(prefix + ".bias") : nullptr),
      weight_offset_(config.layernorm_zero_centered_gamma ? 1.0f : 0.0f) {}

void Norm::forward(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x) const {
  if (kind_ == Normalization::kRMSNorm) {
    ops::rmsnorm_forward(ctx, y, rstd, x, weight_.value, epsilon_, weight_offset_);
  } else {
    ops::layernorm_forward(ctx, y, mean, rstd, x, weight_.value, bias_->value, epsilon_, weight_offset_);
  }
}

void Norm::residual_forward(Context& ctx, const Tensor& residual, const Tensor& y, const Tensor& mean,
                            const Tensor& rstd, const Tensor& x, const Tensor& delta, const Tensor& delta_bias) const {
  if (kind_ == Normalization::kRMSNorm) {
    ops::residual_rmsnorm_forward(ctx, residual, y, rstd, x, delta, delta_bias, weight_.value, epsilon_,
                                  weight_offset_);
  } else {
    ops::residual_layernorm_forward(ctx, residual, y, mean, rstd, x, delta, delta_bias, weight_.value, bias_->value,
                                    epsilon_, weight_offset_);
  }
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
