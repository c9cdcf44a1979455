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
    segments_.push_back({.offset = param.flat_offset, .length = param.numel(), .weight_decay = param.spec->weight_decay});
  }
}

void AdamW::step(Context& ctx, float learning_rate, float grad_scale) {
  ++steps_;
  const ops::AdamWStep step{.learning_rate = learning_rate,
                            .beta1 = config_.beta1,
                            .beta2 = config_.beta2,
                            .epsilon = config_.epsilon,
                            .weight_decay = config_.weight_decay,  // on the segments that take it
                            .step = steps_,
                            .grad_scale = grad_scale};
  ops::adamw_update_segments(ctx, step, master_, params_.flat_grads(), exp_avg_, exp_avg_sq_,
                             separate_master_ ? params_.flat_values() : Tensor(), segments_);
}

}  // namespace gpt
