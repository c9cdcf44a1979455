#include "optim/adamw.h"

namespace gpt {

AdamW::AdamW(Context& ctx, ParamStore& params, const AdamWConfig& config, Arena& arena)
    : params_(params), config_(config), separate_master_(params.dtype() != DType::kFloat32) {
  const int64_t total = params.flat_values().numel();
  if (separate_master_) {
    master_ = arena.allocate(DType::kFloat32, {total});
    ops::cast(ctx, master_, params.flat_values());
  } else {
    master_ = params.flat_values();
  }
  exp_avg_ = arena.allocate_zeroed(DType::kFloat32, {total});
  exp_avg_sq_ = arena.allocate_zeroed(DType::kFloat32, {total});
  for (const Param& param : params.params()) {
    segments_.push_back({param.flat_offset, param.numel(), param.spec->weight_decay});
  }
}

void AdamW::step(Context& ctx, float learning_rate, float grad_scale) {
  ++steps_;
  for (const Segment& segment : segments_) {
    ops::AdamWStep step{.learning_rate = learning_rate,
                        .beta1 = config_.beta1,
                        .beta2 = config_.beta2,
                        .epsilon = config_.epsilon,
                        .weight_decay = segment.weight_decay ? config_.weight_decay : 0.0f,
                        .step = steps_,
                        .grad_scale = grad_scale};
    const Tensor param_copy =
        separate_master_ ? params_.flat_values().flat_range(segment.offset, segment.length) : Tensor();
    ops::adamw_update(ctx, step, master_.flat_range(segment.offset, segment.length),
                      params_.flat_grads().flat_range(segment.offset, segment.length),
                      exp_avg_.flat_range(segment.offset, segment.length),
                      exp_avg_sq_.flat_range(segment.offset, segment.length), param_copy);
  }
}

}  // namespace gpt
