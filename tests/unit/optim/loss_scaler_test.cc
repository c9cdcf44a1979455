// The loss scaler against Megatron's DynamicGradScaler. The expected trajectories were produced by
// running Megatron's own class (megatron/core/optimizer/grad_scaler.py at Megatron-LM commit
// 00caa53, with device='cuda' replaced by 'cpu', growth_factor 2 and backoff_factor 0.5 as
// get_megatron_optimizer passes them) on the scripted sequences below and printing, after each
// update, (scale, _growth_tracker, _hysteresis_tracker); they are not computed by this program.
#include "optim/loss_scaler.h"

#include <string>
#include <vector>

#include "gtest/gtest.h"

namespace gpt {
namespace {

struct Expected {
  float scale;
  int64_t growth_tracker;
  int64_t hysteresis_tracker;
};

// `sequence`: one character per step, 'X' an overflow (found_inf), '.' a clean step.
void expect_trajectory(const LossScalerConfig& config, const std::string& sequence,
                       const std::vector<Expected>& expected) {
  ASSERT_EQ(sequence.size(), expected.size());
  LossScaler scaler(config);
  for (size_t i = 0; i < sequence.size(); ++i) {
    scaler.update(sequence[i] == 'X');
    const LossScalerState& s = scaler.state();
    EXPECT_EQ(s.scale, expected[i].scale) << "step " << i + 1 << " of " << sequence;
    EXPECT_EQ(s.growth_tracker, expected[i].growth_tracker) << "step " << i + 1 << " of " << sequence;
    EXPECT_EQ(s.hysteresis_tracker, expected[i].hysteresis_tracker) << "step " << i + 1 << " of " << sequence;
  }
}

TEST(LossScaler, DefaultsBackOffFromTwoToThe32AfterTheHysteresis) {
  // Megatron's defaults: the first overflow only uses up hysteresis, every later one halves.
  expect_trajectory({.dynamic = true, .initial_scale = 0x1p32f, .min_scale = 1.0f, .window = 1000, .hysteresis = 2},
                    "XXXXXX...",
                    {{4294967296.0f, 0, 1},
                     {2147483648.0f, 0, 0},
                     {1073741824.0f, 0, -1},
                     {536870912.0f, 0, -2},
                     {268435456.0f, 0, -3},
                     {134217728.0f, 0, -4},
                     {134217728.0f, 1, -4},
                     {134217728.0f, 2, -4},
                     {134217728.0f, 3, -4}});
}

TEST(LossScaler, GrowsAfterAWindowOfCleanStepsAndOnlyThenRefillsHysteresis) {
  expect_trajectory({.dynamic = true, .initial_scale = 1024.0f, .min_scale = 1.0f, .window = 4, .hysteresis = 2},
                    "...X....XX....",
                    {{1024.0f, 1, 2},
                     {1024.0f, 2, 2},
                     {1024.0f, 3, 2},
                     {1024.0f, 0, 1},  // an overflow resets growth, spends hysteresis
                     {1024.0f, 1, 1},  // clean steps do not refill it...
                     {1024.0f, 2, 1},
                     {1024.0f, 3, 1},
                     {2048.0f, 0, 2},  // ...until the window completes: scale doubles, refilled
                     {2048.0f, 0, 1},
                     {1024.0f, 0, 0},
                     {1024.0f, 1, 0},
                     {1024.0f, 2, 0},
                     {1024.0f, 3, 0},
                     {2048.0f, 0, 2}});
}

TEST(LossScaler, BacksOffNoFurtherThanTheMinimum) {
  expect_trajectory({.dynamic = true, .initial_scale = 8.0f, .min_scale = 2.0f, .window = 3, .hysteresis = 1},
                    "XXXXXX",
                    {{4.0f, 0, 0}, {2.0f, 0, -1}, {2.0f, 0, -2}, {2.0f, 0, -3}, {2.0f, 0, -4}, {2.0f, 0, -5}});
}

TEST(LossScaler, InterleavedOverflowsWithHysteresisThree) {
  expect_trajectory({.dynamic = true, .initial_scale = 65536.0f, .min_scale = 1.0f, .window = 3, .hysteresis = 3},
                    "X.X.XX...X",
                    {{65536.0f, 0, 2},
                     {65536.0f, 1, 2},
                     {65536.0f, 0, 1},
                     {65536.0f, 1, 1},
                     {32768.0f, 0, 0},
                     {16384.0f, 0, -1},
                     {16384.0f, 1, -1},
                     {16384.0f, 2, -1},
                     {32768.0f, 0, 3},
                     {32768.0f, 0, 2}});
}

TEST(LossScaler, ConstantScalerNeverChanges) {
  LossScaler scaler({.dynamic = false, .initial_scale = 128.0f});
  for (bool overflow : {true, true, false, true, false}) scaler.update(overflow);
  EXPECT_EQ(scaler.scale(), 128.0f);
  EXPECT_EQ(scaler.inverse_scale(), 1.0f / 128.0f);
}

TEST(LossScaler, InverseScaleIsTheDoubleReciprocalRoundedToFloat) {
  // Megatron: scale.double().reciprocal().float().
  LossScaler scaler({.dynamic = false, .initial_scale = 3.0f});
  EXPECT_EQ(scaler.inverse_scale(), static_cast<float>(1.0 / 3.0));
}

}  // namespace
}  // namespace gpt
