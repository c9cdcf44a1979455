// The block's normalization, LayerNorm (weight and bias) or RMSNorm (weight only), with the
// residual add fused in front of it where the layer needs that. x, y: [rows, h]; mean (LayerNorm
// only) and rstd: [rows] float32 statistics kept for backward.
#pragma once

#include <string>

#include "model/config.h"
#include "model/param_store.h"

namespace gpt {

class Norm {
 public:
  // `prefix` names the parameters: prefix + ".weight" (and ".bias" for LayerNorm).
  Norm(const ModelConfig& config, ParamStore& params, const std::string& prefix);

  void forward(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x) const;
  // residual = x + delta (+ delta_bias when defined); y = norm(residual).
  void residual_forward(Context& ctx, const Tensor& residual, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                        const Tensor& x, const Tensor& delta, const Tensor& delta_bias) const;
  // dx = the input gradient of dy (x: the norm's input); the parameter gradients accumulate.
  void backward(Context& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x, const Tensor& mean,
                const Tensor& rstd) const;

 private:
  Normalization kind_;
  float epsilon_;
  Param& weight_;
  Param* bias_;  // LayerNorm only
};

}  // namespace gpt
