#include "optim/lr_schedule.h"

#include <cmath>
#include <numbers>

#include "core/check.h"

namespace gpt {

double learning_rate_at(const LrScheduleConfig& c, int64_t num_steps) {
  const double steps = static_cast<double>(num_steps);
  if (c.warmup_steps > 0 && steps <= c.warmup_steps) return c.max_lr * steps / c.warmup_steps;
  if (c.style == LrDecayStyle::kConstant) return c.max_lr;
  if (num_steps > c.decay_steps) return c.min_lr;
  const double decay_span = static_cast<double>(c.decay_steps) - c.warmup_steps;
  GPT_CHECK_GT(decay_span, 0.0) << "learning-rate decay must be longer than warmup";
  const double ratio = (steps - c.warmup_steps) / decay_span;
  const double coefficient =
      c.style == LrDecayStyle::kLinear ? 1.0 - ratio : 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
  return c.min_lr + coefficient * (c.max_lr - c.min_lr);
}

}  // namespace gpt
