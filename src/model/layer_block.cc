#include "model/layer_block.h"

namespace gpt {

std::string BlockBuild::prefix() const { return "decoder.layers." + std::to_string(layer) + "."; }

Linear BlockBuild::linear(const std::string& module, LinearKind kind, int fp8_slot) const {
  const std::string name = prefix() + module;
  // The registry declares the bias (param_registry.cc: every linear's unless --disable-bias-linear,
  // linear_qkv's also with --add-qkv-bias).
  Param* bias = params.contains(name + ".bias") ? &params.get(name + ".bias") : nullptr;
  return Linear(name, kind, params.get(name + ".weight"), bias, tp, shapes.rows(), shapes.local_rows(),
                deferral_depth, arena, {.scaling = fp8, .layer = layer, .linear = fp8_slot, .context = context.group});
}

ops::DropoutMask LayerDropout::mask(int slot, ops::DropoutSite site) const {
  // Attention probabilities are numbered by global head, hidden activations by global token (each
  // run of consecutive tokens gets its own offset: forward / backward).
  const int64_t row_offset = site == ops::DropoutSite::kAttentionProbabilities ? shapes_.head_offset : 0;
  return dropout_mask(config_, positions_[static_cast<size_t>(slot)], layer_, site, row_offset);
}

Tensor LayerDropout::residual_rows(const Tensor& x) const {
  return x.view({shapes_.local_sequence, shapes_.batch, shapes_.hidden});
}

BlockOutput LayerDropout::forward(Context& ctx, int slot, ops::DropoutSite site, const Tensor& out,
                                  const Tensor& bias) const {
  ops::DropoutMask dropout = mask(slot, site);
  if (!dropout.enabled()) return {.delta = out, .bias = bias};
  for (const SequenceSegment& segment : shapes_.residual_segments()) {
    dropout.row_offset = segment.position;
    const int64_t end = segment.local_row + segment.rows;
    const Tensor rows = residual_rows(out).slice(segment.local_row, end);
    ops::dropout_forward(ctx, rows, rows, bias, dropout);
  }
  return {.delta = out, .bias = Tensor()};
}

void LayerDropout::backward(Context& ctx, int slot, ops::DropoutSite site, const Tensor& dx, const Tensor& dy) const {
  ops::DropoutMask dropout = mask(slot, site);
  for (const SequenceSegment& segment : shapes_.residual_segments()) {
    dropout.row_offset = segment.position;
    const int64_t end = segment.local_row + segment.rows;
    ops::dropout_backward(ctx, residual_rows(dx).slice(segment.local_row, end),
                          residual_rows(dy).slice(segment.local_row, end), dropout);
  }
}

}  // namespace gpt
