// The block's normalization, LayerNorm (weight and bias) or RMSNorm (weight only), with the
// residual add fused in front of it where the layer needs that. x, y: [rows, h]; mean (LayerNorm
// only) and rstd: [rows] float32 statistics kept for backward. With a zero-centred weight
// (--apply-layernorm-1p) the norm scales by 1 + weight, the 1 added in FP32 inside the kernels (as
// Transformer Engine's zero_centered_gamma), so a BF16 weight near 0 keeps its precision.
#pragma once

#include <string>

#include "model/config.h"
#include "model/param_store.h"

namespace gpt {

// The norm's forward on given parameter tensors: weight [width], bias [width] (LayerNorm only,
// undefined for RMSNorm). The one op sequence of Norm (on its ParamStore parameters) and of
// generation (generate/inference_model.cc, on checkpoint tensors).
struct NormForward {
  Normalization kind = Normalization::kLayerNorm;
  float epsilon = 0.0f;
  float weight_offset = 0.0f;  // 1 with a zero-centred weight, else 0
  Tensor weight, bias;

  // The configuration's norm over these parameters (`bias` ignored unless it has LayerNorm biases).
  static NormForward of(const ModelConfig& config, const Tensor& weight, const Tensor& bias);
  void forward(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x) const;
  // residual = x + delta (+ delta_bias when defined); y = norm(residual).
  void residual_forward(Context& ctx, const Tensor& residual, const Tensor& y, const Tensor& mean, const Tensor& rstd,
                        const Tensor& x, const Tensor& delta, const Tensor& delta_bias) const;
};

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
  NormForward forward_op() const;

  Normalization kind_;
  float epsilon_;
  Param& weight_;
  Param* bias_;  // LayerNorm only
  float weight_offset_;  // 1 with a zero-centred weight, else 0
};

}  // namespace gpt
