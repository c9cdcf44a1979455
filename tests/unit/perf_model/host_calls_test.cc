// What the model charges per call: DeepSpeed's 2021 ZeRO-3 per tensor (deepspeed_unit_sharding's
// closed form), the data-parallel buckets as separate collectives, and the host-overhead terms of a
// cluster file per op, per chunk pass and per communication call (overhead_fit.h's features).
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "unit/perf_model/perf_model_fixtures.h"
#include "perf_model/data_parallel_cost.h"
#include "perf_model/predict.h"

namespace gpt::perf {
namespace {

Cluster small_cluster() {
  Cluster c = ideal_cluster_base();
  c.name = "small";
  c.intra_node_latency = 5e-6;
  return c;
}

Prediction predicted(const std::string& flags, int64_t world, const Cluster& cluster, RunOptions options = {}) {
  return predict_layout(flags, world, cluster, options);
}

const std::string kModel =
    "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --seq-length 128 --max-position-embeddings 128 "
    "--vocab-size 1024 --micro-batch-size 1 --global-batch-size 16 ";

TEST(DeepSpeedZeroThree, OneCollectivePerTensorAndReGathersBeyondTheReuseDistance) {
  // Latency only (bandwidth near infinite): every call costs (n - 1) x 1 ms on 5 ranks = 4 ms.
  const Link link{.bandwidth = 1e30, .latency = 1e-3};
  const UnitShardingInput in{.data_ranks = 5, .data_link = link, .parameter_bytes = 2, .gradient_bytes = 4};
  // Forward order: a norm (persistent, 1e3), weight A (8e8), weight B (2e8), a bias (persistent).
  const std::vector<double> tensors = {1e3, 8e8, 2e8, 1e3};
  double forward_calls = 0, backward_calls = 0;
  const UnitSharding plain = deepspeed_unit_sharding(tensors, 0, 0, false, in, forward_calls, backward_calls);
  // Two gathered tensors; four gradients reduce-scattered; backward gathers the two again.
  EXPECT_EQ(forward_calls, 2);
  EXPECT_EQ(backward_calls, 2 + 4);
  EXPECT_NEAR(plain.forward_exposed, 2 * 4e-3, 1e-12);
  EXPECT_NEAR(plain.backward_exposed, (2 + 4) * 4e-3, 1e-12);
  EXPECT_NEAR(plain.traffic, (2 + 2 + 4) * 4e-3, 1e-12);
  // Recomputed: the recompute gathers both; A is used again after 2 x (2e8 + 1e3) > 1e9? No: 4e8.
  // With the default reuse distance 1e9 nothing more; with 3e8, A (distance 4e8) is gathered a third time.
  const UnitSharding recomputed = deepspeed_unit_sharding(tensors, 0, 0, true, in, forward_calls, backward_calls);
  EXPECT_EQ(backward_calls, 2 + 4);
  EXPECT_NEAR(recomputed.traffic, plain.traffic, 1e-12);
  const UnitSharding near_reuse = deepspeed_unit_sharding(tensors, 0, 0, true, in, forward_calls, backward_calls,
                                                          {.max_reuse_distance = 3e8});
  EXPECT_EQ(backward_calls, 2 + 1 + 4);
  EXPECT_NEAR(near_reuse.traffic, plain.traffic + 4e-3, 1e-12);
}

TEST(DeepSpeedZeroThree, PrefetchOnlyWhenTwoUnitsFitUnderMaxLiveParameters) {
  const Link link{.bandwidth = 1e30, .latency = 1e-3};
  const UnitShardingInput in{.data_ranks = 5, .data_link = link, .parameter_bytes = 2, .gradient_bytes = 4,
                             .overlap_param_gather = true, .hidden_fraction = 1.0};
  double f = 0, b = 0;
  // 4e8 gathered elements: two units (8e8) fit under 1e9, the gather hides behind 1 s of compute.
  EXPECT_NEAR(deepspeed_unit_sharding({4e8}, 1.0, 1.0, false, in, f, b).forward_exposed, 0, 1e-12);
  // 6e8: two do not fit; the fetch is waited for at once.
  EXPECT_NEAR(deepspeed_unit_sharding({6e8}, 1.0, 1.0, false, in, f, b).forward_exposed, 4e-3, 1e-12);
}

TEST(DeepSpeedZeroThree, SlowerThanAUnitWiseGatherAtLargeDataParallelism) {
  Cluster c = small_cluster();
  c.inter_node_latency = 10e-6;
  c.dp_comm_overlap_fraction = 0.9;
  const std::string flags = kModel + "--bf16 --use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params "
                                     "--overlap-param-gather --overlap-grad-reduce ";
  const Prediction unit_wise = predicted(flags, 16, c, {.implementation = Implementation::kMegatron});
  const Prediction deepspeed = predicted(flags, 16, c, {.implementation = Implementation::kDeepSpeed});
  EXPECT_GT(deepspeed.zero3_traffic_time, unit_wise.zero3_traffic_time);
  EXPECT_GT(deepspeed.iteration_time, unit_wise.iteration_time);
  EXPECT_GT(deepspeed.collective_calls, unit_wise.collective_calls);
  // Megatron's model code under both: the same memory.
  EXPECT_EQ(deepspeed.memory.total(), unit_wise.memory.total());
}

TEST(DataParallelBuckets, ZeroTwoReducesEveryUnitOfEveryMicrobatch) {
  // ZeRO-2 (Megatron-FSDP): a bucket per unit (4 layers, the embedding, the output layer), each
  // reduce-scattered every microbatch and all-gathered after the step; ZeRO-1: one bucket.
  const Cluster c = small_cluster();
  const Prediction zero1 = predicted(kModel + "--use-distributed-optimizer", 4, c);
  const Prediction zero2 = predicted(kModel + "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads", 4, c);
  ASSERT_EQ(zero2.microbatches, 4);
  // Calls beyond the step's scalar all-reduces (loss and gradient norm over DP: 2 with a sharded optimizer).
  EXPECT_EQ(zero1.collective_calls, 2 + 2);
  EXPECT_EQ(zero2.collective_calls, 6 * (4 + 1) + 2);
  // Merged into one unit, the same bytes in one call per microbatch: less latency.
  const Prediction merged = predicted(kModel +
                                          "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads "
                                          "--suggested-communication-unit-size 100000000",
                                      4, c);
  EXPECT_EQ(merged.collective_calls, 1 * (4 + 1) + 2);
  EXPECT_LT(merged.dp_comm_time, zero2.dp_comm_time);
  EXPECT_GT(zero2.scalar_comm_time, 0);
}

TEST(HostOverhead, ChargedPerOpPassAndCallAsTheCountsSay) {
  Cluster bare = small_cluster();
  Cluster charged = bare;
  charged.kernel_overhead = 3e-6;
  charged.microbatch_overhead = 50e-6;
  charged.collective_overhead = 20e-6;
  charged.iteration_overhead = 1e-3;
  for (const std::string layout : {"--use-distributed-optimizer", "--tensor-model-parallel-size 2",
                                   "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads"}) {
    const Prediction a = predicted(kModel + layout, 4, bare);
    const Prediction b = predicted(kModel + layout, 4, charged);
    EXPECT_GT(a.op_calls, 0) << layout;
    EXPECT_EQ(a.pass_calls, 2.0 * a.microbatches) << layout;
    // PP 1: every op, pass and call is on the one rank's critical path.
    EXPECT_NEAR(b.iteration_time - a.iteration_time,
                3e-6 * a.op_calls + 50e-6 * a.pass_calls + 20e-6 * a.collective_calls + 1e-3, 1e-9)
        << layout;
  }
}

}  // namespace
}  // namespace gpt::perf
