#include "train/model_stage.h"

#include "core/phase_timer.h"

namespace gpt {

Shape ModelStage::boundary_shape() const {
  const LayerShapes& s = model_.shapes();
  return Shape({s.local_sequence, s.batch, s.hidden});
}

std::optional<Tensor> ModelStage::forward(Context& ctx, int slot, int64_t microbatch,
                                          const std::optional<Tensor>& input) {
  // Every chunk needs the microbatch's position (dropout masks); the first and last its data.
  model_.set_position(slot, feed_.position(microbatch));
  if (model_.layout().has_embedding || model_.layout().has_output) {
    const phase_timer::Scope timed(ctx, phase_timer::Phase::kBatchGenerator);
    feed_.load(ctx, model_, slot, microbatch);
  }
  return model_.forward(ctx, slot, input, feed_.loss());
}

std::optional<Tensor> ModelStage::backward(Context& ctx, int slot, int64_t microbatch,
                                           const std::optional<Tensor>& grad_output, bool last_of_step) {
  return model_.backward(ctx, slot, grad_output, last_of_step);
}

std::optional<Tensor> ModelStage::backward_input(Context& ctx, int slot, int64_t microbatch,
                                                 const std::optional<Tensor>& grad_output, bool last_of_step) {
  return model_.backward_input(ctx, slot, grad_output, WeightGradTiming::kDeferred, last_of_step);
}

void ModelStage::backward_weight(Context& ctx, int slot, int64_t /*microbatch*/) { model_.backward_weight(ctx, slot); }

}  // namespace gpt
