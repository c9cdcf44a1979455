// Megatron's gradient scalers (megatron/core/optimizer/grad_scaler.py) and the unscale-and-check
// step of its mixed-precision optimizer (optimizer.py, MixedPrecisionOptimizer): the loss is
// multiplied by the scale before backward, the FP32 main gradients are multiplied by 1 / scale
// before clipping and the norm, and a non-finite gradient anywhere skips the step everywhere and
// tells the scaler. The rules, written down from Megatron's code: docs/MIXED_PRECISION.md.
#pragma once

#include <cstdint>
#include <span>

#include "core/context.h"
#include "model/param_store.h"
#include "parallel/comm/communicator.h"
#include "parallel/data_parallel/range.h"

namespace gpt {

struct LossScalerConfig {
  bool dynamic = true;         // DynamicGradScaler; false: ConstantGradScaler (--loss-scale)
  float initial_scale = 0x1p32f;  // --initial-loss-scale, or --loss-scale's constant
  float min_scale = 1.0f;      // --min-loss-scale
  int64_t window = 1000;       // --loss-scale-window: clean steps before the scale doubles
  int64_t hysteresis = 2;      // --hysteresis: overflows before the scale halves
};

// The scaler's state as Megatron's state_dict holds it (a constant scaler has only its scale).
struct LossScalerState {
  float scale = 1.0f;
  int64_t growth_tracker = 0;
  int64_t hysteresis_tracker = 0;
};

class LossScaler {
 public:
  // The config must be valid (validate_arguments checks the flags): positive finite scales,
  // min_scale <= initial_scale, window and hysteresis > 0.
  explicit LossScaler(const LossScalerConfig& config);

  // The FP32 scale the loss is multiplied by (Megatron's scaler.scale, a float32 tensor).
  float scale() const { return state_.scale; }
  // 1 / scale computed in double and rounded to FP32, as Megatron's inv_scale.
  float inverse_scale() const;
  // After a step's check: DynamicGradScaler.update(found_inf); nothing for a constant scaler.
  //   overflow: growth tracker = 0; hysteresis tracker -= 1; when it is <= 0, scale =
  //             max(scale * 0.5, min_scale) (so every further overflow halves again);
  //   clean:    growth tracker += 1; when it reaches the window: growth tracker = 0, hysteresis
  //             tracker = hysteresis, scale *= 2 (one clean step alone does not refill it).
  void update(bool found_non_finite);

  bool dynamic() const { return config_.dynamic; }
  const LossScalerConfig& config() const { return config_; }
  const LossScalerState& state() const { return state_; }
  void set_state(const LossScalerState& state) { state_ = state; }

 private:
  LossScalerConfig config_;
  LossScalerState state_;
};

// Megatron's _unscale_main_grads_and_check_for_nan: multiplies this rank's FP32 main gradients in
// `owned` (empty: the whole buffer) by `inverse_scale` and counts the non-finite ones, then sums
// the count over `groups` (the model-parallel group, and the data-parallel group when gradients
// are sharded: every rank that holds gradients). True on every rank when any rank has one.
// `count_scratch` is an int64 [1], `float_scratch` a float32 [1] tensor.
bool unscale_and_check_gradients(Context& ctx, const ParamStore& params, std::span<const Range> owned,
                                 float inverse_scale, const Tensor& count_scratch, const Tensor& float_scratch,
                                 std::span<Communicator* const> groups);

}  // namespace gpt
