// --num-distributed-optimizer-instances before anything is allocated: each rank's shard plan is laid
// out over its instance (DP x CP / N consecutive members, at its place modulo that size), and both
// the memory plan's closed form and its exact plan give each rank the optimizer state of 1 / (DP / N)
// of the elements, N times what one instance over all of DP gives.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "train/args/arguments.h"
#include "train/configs.h"
#include "train/memory_plan.h"

namespace gpt {
namespace {

Arguments validated(int64_t instances, int64_t world, std::vector<std::string> extra = {}) {
  std::vector<std::string> flags = {"pretrain_gpt", "--mock-data", "--vocab-size", "512", "--num-layers", "2",
                                    "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
                                    "--max-position-embeddings", "32", "--micro-batch-size", "1",
                                    "--global-batch-size", "8", "--train-iters", "5", "--lr", "1e-3",
                                    "--use-distributed-optimizer", "--num-distributed-optimizer-instances",
                                    std::to_string(instances)};
  flags.insert(flags.end(), extra.begin(), extra.end());
  absl::StatusOr<Arguments> parsed = parse_arguments(flags);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(std::string(prepare_arguments(*parsed).message()), "");
  EXPECT_EQ(std::string(prepare_for_world(*parsed, world).message()), "");
  return *parsed;
}

TEST(OptimizerInstances, ShardPlanIsLaidOutOverTheInstance) {
  // CP 2 x DP 4 = 8 data x context places in 2 instances of 4: place cp + 2 dp, its rank in the
  // instance place mod 4.
  const Arguments args = validated(2, 8, {"--context-parallel-size", "2"});
  const GridShape shape{.data = 4, .context = 2, .optimizer_instances = 2};
  for (int dp = 0; dp < 4; ++dp) {
    for (int cp = 0; cp < 2; ++cp) {
      const ShardPlanConfig config = shard_plan_config_from(args, shape, {.data = dp, .context = cp});
      EXPECT_EQ(config.data_parallel_size, 4);
      EXPECT_EQ(config.data_parallel_rank, (cp + 2 * dp) % 4) << "dp " << dp << " cp " << cp;
    }
  }
}

TEST(OptimizerInstances, MemoryPlanShardsTheOptimizerOverTheInstance) {
  // DP 8: the optimizer state over 8, 4 and 2 ranks; parameters and gradients are not sharded.
  int64_t closed[3] = {}, exact[3] = {};
  const int64_t counts[3] = {1, 2, 4};
  for (int i = 0; i < 3; ++i) {
    absl::StatusOr<MemoryPlan> plan = plan_memory(validated(counts[i], 8), 8, 512);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(plan->allocated.has_value());
    closed[i] = plan->optimizer_state;
    exact[i] = plan->allocated->optimizer_state;
    // A refusal for want of memory names the instances with the other flags that size a rank.
    EXPECT_EQ(plan->layout.find("--num-distributed-optimizer-instances") != std::string::npos, counts[i] > 1)
        << plan->layout;
  }
  // The exact plan counts the parameters' elements in the rank's shards (a shard's alignment
  // padding has no state), so its ratios hold within the padding; the closed form rounds each
  // rank's share up.
  for (int i = 1; i < 3; ++i) {
    SCOPED_TRACE(testing::Message() << counts[i] << " instances");
    EXPECT_NEAR(static_cast<double>(exact[i]), counts[i] * static_cast<double>(exact[0]), 0.01 * exact[i]);
    EXPECT_NEAR(static_cast<double>(closed[i]), counts[i] * static_cast<double>(closed[0]), 16.0 * counts[i]);
  }
}

}  // namespace
}  // namespace gpt
