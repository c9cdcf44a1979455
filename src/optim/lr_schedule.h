// Megatron's OptimizerParamScheduler learning-rate rule. Steps are counted in samples (the
// scheduler advances by the global batch size each iteration): linear warmup from 0 to max_lr over
// warmup_steps, then constant, linear or cosine decay to min_lr at decay_steps, min_lr after.
// As in Megatron, iteration k's update uses lr(num_steps = (k - 1) * gbs), and the log line of
// iteration k shows lr(k * gbs), the rate of the next update.
#pragma once

#include <cstdint>

namespace gpt {

enum class LrDecayStyle { kConstant, kLinear, kCosine };

struct LrScheduleConfig {
  double max_lr = 0.0;
  double min_lr = 0.0;
  // Samples. Fractional where Megatron's is: --lr-warmup-fraction x the decay samples is a Python
  // float there, and truncating it would change the warmup's slope and its last step.
  double warmup_steps = 0.0;
  int64_t decay_steps = 0;   // samples
  LrDecayStyle style = LrDecayStyle::kLinear;
};

double learning_rate_at(const LrScheduleConfig& config, int64_t num_steps);

}  // namespace gpt
