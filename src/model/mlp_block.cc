#include "model/mlp_block.h"

#include <optional>

#include "model/workspace_borrow.h"

namespace gpt {

std::unique_ptr<FeedForwardBlock> make_feed_forward_block(const BlockBuild& build) {
  return std::make_unique<MlpBlock>(build);
}

MlpActivation mlp_activation(const ModelConfig& config) {
  if (config.swiglu) return MlpActivation::kSwiglu;
  if (config.exact_gelu) return MlpActivation::kExactGelu;
  if (config.squared_relu) return MlpActivation::kSquaredRelu;
  return MlpActivation::kGelu;
}

MlpBlock::MlpBlock(const BlockBuild& b)
    : activation_(mlp_activation(b.config)),
      ws_(b.workspace),
      dropout_(b.config, b.layer, b.shapes, b.positions),
      fc1_(b.linear("mlp.linear_fc1", LinearKind::kColumnParallel, 2)),
      fc2_(b.linear("mlp.linear_fc2", LinearKind::kRowParallel, 3)) {}

int64_t MlpBlock::deferral_bytes(const ModelConfig& config, const LayerShapes& s, bool sequence_parallel,
                                 int deferral_depth) {
  auto bytes = [&](LinearKind kind, const Shape& weight) {
    return Linear::deferral_bytes(kind, weight, config.add_bias_linear, sequence_parallel, config.dtype, s.rows(),
                                  s.local_rows(), deferral_depth);
  };
  return bytes(LinearKind::kColumnParallel, Shape{s.local_fc1, s.hidden}) +
         bytes(LinearKind::kRowParallel, Shape{s.hidden, s.local_ffn});
}

void MlpBlock::forward_up(Context& ctx, int, const MlpActivations& a, const Tensor& input) {
  const Borrow gathered(ws_.full_a, "MLP block: fc1's gathered input");
  mlp_up_forward(ctx, activation_, a.fc1_pre, a.fc1_act, [&](const Tensor& out, const Tensor& pre_gelu) {
    fc1_.forward_column(ctx, out, input, *gathered, pre_gelu);
  });
}

BlockOutput MlpBlock::forward_down(Context& ctx, int slot, const MlpActivations& a) {
  const Tensor out = fc2_.forward_row(ctx, ws_.full_a, a.fc1_act, ws_.local_a);  // [s_l, b, h]
  return dropout_.forward(ctx, slot, ops::DropoutSite::kMlpOutput, out, fc2_.bias());
}

Tensor mlp_activation_backward(Context& ctx, MlpActivation kind, const Tensor& d_act, const Tensor& d_fc1,
                               const Tensor& fc1_pre) {
  switch (kind) {
    case MlpActivation::kSwiglu:
      ops::swiglu_backward(ctx, d_fc1.as_matrix(), d_act.as_matrix(), fc1_pre.as_matrix());
      return d_fc1;
    case MlpActivation::kExactGelu:
      ops::gelu_exact_backward(ctx, d_act, d_act, fc1_pre);
      return d_act;
    case MlpActivation::kSquaredRelu:
      ops::squared_relu_backward(ctx, d_act, d_act, fc1_pre);
      return d_act;
    case MlpActivation::kGelu:
      ops::gelu_backward(ctx, d_act, d_act, fc1_pre);
      return d_act;
  }
  return d_act;
}

Tensor MlpBlock::backward_input(Context& ctx, int slot, const MlpActivations& a, const Tensor& input,
                                const Tensor& grad_output, WeightGradTiming timing) {
  // y = D(fc2(act(fc1(b))) + b2): fc2's input gradient first, into ffn [s, b, ffn_l].
  const Borrow d_act(ws_.ffn, "MLP block: fc2's input gradient");
  {
    std::optional<Borrow> dropped;  // local_b, until fc2's input gradient has read it
    Tensor d_out = grad_output;     // [s_l, b, h] gradient of fc2's output (+ bias)
    if (dropout_.enabled(slot, ops::DropoutSite::kMlpOutput)) {
      dropped.emplace(ws_.local_b, "MLP block: gradient through its dropout");
      dropout_.backward(ctx, slot, ops::DropoutSite::kMlpOutput, **dropped, grad_output);
      d_out = **dropped;
    }
    const Borrow gathered(ws_.full_a, "MLP block: fc2's gathered output gradient");
    fc2_.backward_input_row(ctx, d_out, a.fc1_act, *gathered, *d_act, timing);
  }
  // With SwiGLU fc1's output gradient is its own buffer; else the activation's runs in place.
  std::optional<Borrow> d_fc1_held;
  if (activation_ == MlpActivation::kSwiglu) d_fc1_held.emplace(ws_.fc1, "MLP block: fc1's output gradient");
  const Tensor d_fc1 = mlp_activation_backward(ctx, activation_, ws_.ffn, ws_.fc1, a.fc1_pre);  // [s, b, fc1_l]
  // full_a takes fc1's input gathered again (fc2's output gradient there is consumed).
  return fc1_.backward_input_column(ctx, d_fc1, input, ws_.full_a, ws_.full_b, ws_.local_a, timing);
}

void MlpBlock::backward_weight(Context& ctx) {
  fc2_.backward_weight(ctx);
  fc1_.backward_weight(ctx);
}

}  // namespace gpt
