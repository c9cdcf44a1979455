#include "optim/loss_scaler.h"

#include <algorithm>
#include <vector>

#include "core/check.h"
#include "core/stream_copy.h"
#include "kernels/ops.h"
#include "optim/grad_clip.h"

namespace gpt {

LossScaler::LossScaler(const LossScalerConfig& config) : config_(config) {
  GPT_CHECK(config.initial_scale > 0.0f) << "loss scale " << config.initial_scale;
  if (config.dynamic) {
    GPT_CHECK(config.min_scale > 0.0f && config.min_scale <= config.initial_scale && config.window > 0 &&
              config.hysteresis > 0)
        << "dynamic loss scaler: min " << config.min_scale << ", window " << config.window << ", hysteresis "
        << config.hysteresis;
  }
  state_.scale = config.initial_scale;
  state_.growth_tracker = 0;
  state_.hysteresis_tracker = config.dynamic ? config.hysteresis : 0;
}

float LossScaler::inverse_scale() const { return static_cast<float>(1.0 / static_cast<double>(state_.scale)); }

void LossScaler::update(bool found_non_finite) {
  if (!config_.dynamic) return;  // ConstantGradScaler.update: nothing
  if (found_non_finite) {
    state_.growth_tracker = 0;
    state_.hysteresis_tracker -= 1;
    // FP32 arithmetic, as Megatron's float32 tensors: torch.max(scale * backoff, min_scale).
    if (state_.hysteresis_tracker <= 0) state_.scale = std::max(state_.scale * 0.5f, config_.min_scale);
  } else {
    state_.growth_tracker += 1;
    if (state_.growth_tracker == config_.window) {
      state_.growth_tracker = 0;
      state_.hysteresis_tracker = config_.hysteresis;
      state_.scale = state_.scale * 2.0f;
    }
  }
}

bool unscale_and_check_gradients(Context& ctx, const ParamStore& params, std::span<const Range> owned,
                                 float inverse_scale, const Tensor& count_scratch, const Tensor& float_scratch,
                                 std::span<Communicator* const> groups) {
  const Range whole{0, params.plan().flat_elements()};
  const std::span<const Range> ranges = owned.empty() ? std::span<const Range>(&whole, 1) : owned;
  ops::zero(ctx, count_scratch);
  for (const Range& range : ranges) {
    if (range.empty()) continue;
    const Tensor grads = params.grads_in(range);  // the flat gradients, or under ZeRO-2 the shard's
    // torch._amp_foreach_non_finite_check_and_unscale_: check, then multiply (inf * 1/scale stays
    // inf, so the order does not change the answer).
    ops::count_non_finite(ctx, count_scratch, grads);
    ops::scale(ctx, grads, inverse_scale);
  }
  int64_t count = 0;
  copy_to_host(ctx, &count, count_scratch);
  ctx.synchronize();
  // Megatron all-reduces found_inf with MAX over the grad-stats group; a sum of 0/1 flags over the
  // groups in turn is positive exactly when the maximum is.
  const float found = count > 0 ? 1.0f : 0.0f;
  copy_to_device(ctx, float_scratch, &found);
  sum_over_groups(ctx, float_scratch, groups);
  float total = 0.0f;
  copy_to_host(ctx, &total, float_scratch);
  ctx.synchronize();
  return total > 0.0f;
}

}  // namespace gpt
