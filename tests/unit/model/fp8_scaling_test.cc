// Delayed FP8 scaling's rules (Transformer Engine's DelayedScaling) on scripted amaxes, written from
// the recipe: scale = max / amax / 2^margin from the history's most recent entry or its maximum,
// unchanged where the amax is 0 or not finite; evaluations record nothing; the records round-trip.
#include <cmath>

#include "core/context.h"
#include "gtest/gtest.h"
#include "model/fp8_scaling.h"
#include "parallel/comm/self_communicator.h"

namespace gpt {
namespace {

TEST(Fp8Scaling, TensorwiseScalesEachTensorByItsOwnAmax) {
  Fp8Scaling scaling({.enabled = true, .backward_format = Fp8Format::kE5M2, .recipe = Fp8Recipe::kTensorwise}, 2);
  EXPECT_EQ(scaling.scale(1, 2, Fp8Role::kInput, 4.0f), 448.0f / 4.0f);
  EXPECT_EQ(scaling.scale(1, 2, Fp8Role::kGradOutput, 2.0f), 57344.0f / 2.0f);
  EXPECT_EQ(scaling.scale(0, 0, Fp8Role::kWeight, 0.0f), 1.0f);
  EXPECT_EQ(scaling.scale(0, 0, Fp8Role::kWeight, INFINITY), 1.0f);
}

TEST(Fp8Scaling, DelayedFollowsTheHistory) {
  Context ctx = Context::cpu(1);
  SelfCommunicator world("world");
  for (bool history_max : {false, true}) {
    Fp8Scaling scaling({.enabled = true, .recipe = Fp8Recipe::kDelayed, .margin = 1, .amax_history_len = 3,
                        .amax_history_max = history_max},
                       1);
    // Step amaxes of one tensor: 8, then 2 (twice within the step: the maximum counts), 1, 0, 0.5.
    const std::vector<std::vector<float>> steps = {{8.0f}, {1.0f, 2.0f}, {1.0f}, {0.0f}, {0.5f}};
    // most_recent: 448/8/2, 448/2/2, 448/1/2, unchanged (amax 0), 448/0.5/2.
    // max over 3 steps: 448/8/2, 448/8/2, 448/8/2, 448/2/2 (history 2, 1, 0), 448/1/2 (1, 0, 0.5).
    const std::vector<float> want_recent = {28.0f, 112.0f, 224.0f, 224.0f, 448.0f};
    const std::vector<float> want_max = {28.0f, 28.0f, 28.0f, 112.0f, 224.0f};
    float scale = scaling.scale(0, 1, Fp8Role::kInput, 100.0f);  // before any step: 1, nothing recorded
    EXPECT_EQ(scale, 1.0f);
    for (size_t k = 0; k < steps.size(); ++k) {
      scaling.begin_step();
      for (float amax : steps[k]) EXPECT_EQ(scaling.scale(0, 1, Fp8Role::kInput, amax), scale);
      scaling.end_step(ctx, world);
      EXPECT_FALSE(scaling.needs_amax());  // outside a step (an evaluation) no amax is wanted
      scale = scaling.scale(0, 1, Fp8Role::kInput, 1000.0f);  // nor recorded
      EXPECT_EQ(scale, history_max ? want_max[k] : want_recent[k]) << "step " << k << " max " << history_max;
    }
    // Records round-trip into a fresh state; a history of another length is refused.
    std::map<std::string, std::string> records;
    scaling.save_records(records);
    EXPECT_EQ(records.size(), 12u);  // 4 linears x 3 roles
    Fp8Scaling restored({.enabled = true, .recipe = Fp8Recipe::kDelayed, .margin = 1, .amax_history_len = 3,
                         .amax_history_max = history_max},
                        1);
    ASSERT_TRUE(restored.load_records(records).ok());
    EXPECT_EQ(restored.scale(0, 1, Fp8Role::kInput, 0.0f), scale);
    Fp8Scaling shorter({.enabled = true, .recipe = Fp8Recipe::kDelayed, .amax_history_len = 2}, 1);
    const absl::Status refused = shorter.load_records(records);
    EXPECT_FALSE(refused.ok());
    EXPECT_NE(refused.message().find("--fp8-amax-history-len is 2"), std::string::npos) << refused.message();
  }
}

}  // namespace
}  // namespace gpt
