// Megatron's OptimizerParamScheduler (megatron/core/optimizer_param_scheduler.py get_lr) with the
// step counts that sample-based flags and warmup fractions give: lengths that are not whole global
// batches, and a fractional warmup (Megatron's lr_warmup_fraction x lr_decay_steps is a float).
#include <cmath>
#include <numbers>
#include <string>

#include "gtest/gtest.h"
#include "optim/lr_schedule.h"

namespace gpt {
namespace {

// get_lr written out as Megatron's Python does it (init_lr 0), in doubles.
double megatron_lr(double max_lr, double min_lr, double warmup, double decay, const char* style, double steps) {
  if (warmup > 0 && steps <= warmup) return max_lr * steps / warmup;
  if (std::string(style) == "constant") return max_lr;
  if (steps > decay) return min_lr;
  const double ratio = (steps - warmup) / (decay - warmup);
  const double coeff = std::string(style) == "linear" ? 1.0 - ratio : 0.5 * (std::cos(std::numbers::pi * ratio) + 1.0);
  return min_lr + coeff * (max_lr - min_lr);
}

TEST(LrSchedule, FractionalWarmupIsMegatrons) {
  // --lr-warmup-fraction 0.015 of 100 decay samples: 1.5 samples of warmup, not 1.
  LrScheduleConfig c{.max_lr = 2.0, .min_lr = 0.5, .warmup_steps = 0.015 * 100, .decay_steps = 100,
                     .style = LrDecayStyle::kLinear};
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 1), 2.0 / 1.5);  // still warming up (truncated to 1: already 2.0)
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 2), 0.5 + (1.0 - 0.5 / 98.5) * 1.5);
  for (const char* style : {"linear", "cosine", "constant"}) {
    c.style = std::string(style) == "linear" ? LrDecayStyle::kLinear
              : std::string(style) == "cosine" ? LrDecayStyle::kCosine
                                               : LrDecayStyle::kConstant;
    for (int64_t steps = 0; steps <= 120; ++steps) {
      EXPECT_DOUBLE_EQ(learning_rate_at(c, steps),
                       megatron_lr(2.0, 0.5, c.warmup_steps, 100, style, static_cast<double>(steps)))
          << style << " at " << steps;
    }
  }
}

TEST(LrSchedule, SampleCountsThatAreNotWholeBatches) {
  // --train-samples 100 --lr-warmup-samples 12 --lr-decay-samples 90, global batch 8: the rate
  // iteration k uses is lr((k - 1) x 8); warmup ends between batches and decay inside one.
  const LrScheduleConfig c{.max_lr = 1e-3, .min_lr = 1e-5, .warmup_steps = 12, .decay_steps = 90,
                           .style = LrDecayStyle::kCosine};
  for (int64_t iteration = 1; iteration <= 12; ++iteration) {
    const double steps = static_cast<double>((iteration - 1) * 8);
    EXPECT_DOUBLE_EQ(learning_rate_at(c, (iteration - 1) * 8), megatron_lr(1e-3, 1e-5, 12, 90, "cosine", steps))
        << "iteration " << iteration;
  }
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 8), 1e-3 * 8 / 12);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 88),
                   1e-5 + 0.5 * (std::cos(std::numbers::pi * 76.0 / 78.0) + 1.0) * (1e-3 - 1e-5));
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 96), 1e-5);  // past --lr-decay-samples
}

}  // namespace
}  // namespace gpt
