// ZeRO-3's per-unit traffic and optimizer offload in the performance model: the closed forms of
// data_parallel_cost.h, and that a changed input moves the prediction the way it must.
#include "perf_model/data_parallel_cost.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "unit/perf_model/perf_model_fixtures.h"
#include "perf_model/predict.h"
#include "perf_model/search.h"

namespace gpt::perf {
namespace {

Cluster ideal_cluster() {
  Cluster c = ideal_cluster_base();
  c.intra_node_latency = 5e-6;
  c.dp_comm_overlap_fraction = 0.9;
  c.host_link_bandwidth = 25e9;
  c.host_adamw_bandwidth = 20e9;
  return c;
}

Prediction predicted(const std::string& flags, int64_t world, const Cluster& cluster = ideal_cluster(),
                     RunOptions options = {}) {
  return predict_layout(flags, world, cluster, options);
}

const std::string kModel =
    "--num-layers 8 --hidden-size 1024 --num-attention-heads 16 --seq-length 1024 --max-position-embeddings 1024 "
    "--vocab-size 32000 --micro-batch-size 1 --global-batch-size 32 --bf16 ";
const std::string kZero2 = "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads ";
const std::string kZero3 = "--use-megatron-fsdp --data-parallel-sharding-strategy optim_grads_params ";
const std::string kOverlap = "--overlap-param-gather --overlap-grad-reduce ";

TEST(ZeroThree, UnitTrafficClosedForm) {
  const Link link{.bandwidth = 100e9, .latency = 0};
  const UnitShardingInput in{.data_ranks = 4, .data_link = link, .parameter_bytes = 2, .gradient_bytes = 4,
                             .hidden_fraction = 0.9};
  // 1e9 elements: gather 3/4 x 2e9 B / 100e9 = 15 ms, reduce-scatter 3/4 x 4e9 / 100e9 = 30 ms.
  const UnitSharding exposed = unit_sharding(1e9, 1.0, 1.0, in);
  EXPECT_NEAR(exposed.forward_exposed, 0.015, 1e-12);
  EXPECT_NEAR(exposed.backward_exposed, 0.045, 1e-12);
  EXPECT_NEAR(exposed.traffic, 0.060, 1e-12);
  UnitShardingInput overlapped = in;
  overlapped.overlap_param_gather = overlapped.overlap_grad_reduce = true;
  // Long compute hides all but the cluster's 10%; no compute hides nothing.
  EXPECT_NEAR(unit_sharding(1e9, 1.0, 1.0, overlapped).forward_exposed, 0.0015, 1e-12);
  EXPECT_NEAR(unit_sharding(1e9, 1.0, 1.0, overlapped).backward_exposed, 0.0045, 1e-12);
  EXPECT_NEAR(unit_sharding(1e9, 0.0, 0.0, overlapped).backward_exposed, 0.045, 1e-12);
  EXPECT_NEAR(unit_sharding(1e9, 0.010, 0.0, overlapped).forward_exposed, 0.005, 1e-12);
  EXPECT_EQ(unit_sharding(1e9, 1.0, 1.0, UnitShardingInput{.data_ranks = 1}).traffic, 0.0);
}

TEST(ZeroThree, GathersPerUnitAndMicrobatchInsideThePipeline) {
  const Prediction zero2 = predicted(kModel + kZero2, 8), zero3 = predicted(kModel + kZero3, 8);
  EXPECT_EQ(zero3.zero_level, 3);
  EXPECT_GT(zero3.zero3_traffic_time, 0.0);
  EXPECT_EQ(zero3.dp_exposed_time, 0.0);  // nothing left after the pipeline
  EXPECT_GT(zero3.iteration_time, zero2.iteration_time);
  // Twice the microbatches: twice the gathers (per-microbatch re-gather).
  const Prediction more = predicted(kModel.substr(0, kModel.find("--global-batch-size")) +
                                        "--global-batch-size 64 --bf16 " + kZero3, 8);
  EXPECT_NEAR(more.zero3_traffic_time, 2 * zero3.zero3_traffic_time, 1e-9 * more.zero3_traffic_time);
  // Prefetch and overlap hide most of it; a slower link exposes more.
  const Prediction overlapped = predicted(kModel + kZero3 + kOverlap, 8);
  EXPECT_LT(overlapped.zero3_exposed_time, 0.5 * zero3.zero3_exposed_time);
  Cluster slow = ideal_cluster();
  slow.intra_node_bandwidth /= 10;
  EXPECT_GT(predicted(kModel + kZero3, 8, slow).iteration_time, zero3.iteration_time);
  // Under pipeline parallelism every stage still gathers per microbatch.
  const Prediction piped = predicted(kModel + kZero3 + "--pipeline-model-parallel-size 2", 8);
  EXPECT_GT(piped.zero3_traffic_time, 0.0);
  // Memory: the plan's (ZeRO-2's bytes until the planner shards parameters).
  EXPECT_LE(zero3.memory.total(), predicted(kModel + "--use-distributed-optimizer", 8).memory.total());
}

TEST(Offload, HostStepAndCopiesFromTheClusterFile) {
  const std::string offload = "--use-distributed-optimizer --use-precision-aware-optimizer --optimizer-cpu-offload ";
  const Prediction none = predicted(kModel + "--use-distributed-optimizer", 8);
  const Prediction full = predicted(kModel + offload, 8);
  const Prediction half = predicted(kModel + offload + "--optimizer-offload-fraction 0.5", 8);
  EXPECT_GT(full.optimizer_time, half.optimizer_time);
  EXPECT_GT(half.optimizer_time, none.optimizer_time);
  EXPECT_LT(full.memory.optimizer_state, none.memory.optimizer_state);
  // Owned parameters P / 8: copies 4 + 2 bytes each over 25 GB/s, host AdamW 34 bytes at 20 GB/s.
  const double owned = std::ceil(none.memory.parameters / 2 / 8);
  EXPECT_NEAR(full.offload_copy_time, owned * 6 / 25e9, 1e-9);
  EXPECT_NEAR(full.host_optimizer_time, owned * 34 / 20e9, 1e-9);
  EXPECT_NEAR(full.optimizer_time, full.offload_copy_time + full.host_optimizer_time, 1e-12);
  // A faster host, a faster link, or pipelining the copies: faster.
  Cluster fast_host = ideal_cluster();
  fast_host.host_adamw_bandwidth *= 4;
  EXPECT_LT(predicted(kModel + offload, 8, fast_host).iteration_time, full.iteration_time);
  Cluster fast_link = ideal_cluster();
  fast_link.host_link_bandwidth *= 4;
  EXPECT_LT(predicted(kModel + offload, 8, fast_link).iteration_time, full.iteration_time);
  RunOptions pipelined;
  pipelined.overlap_offload_copies = true;
  const Prediction overlapped = predicted(kModel + offload, 8, ideal_cluster(), pipelined);
  EXPECT_NEAR(overlapped.optimizer_time, std::max(full.host_optimizer_time, owned * 4 / 25e9), 1e-9);
}

TEST(Offload, RefusedOnAClusterWithoutAHost) {
  Cluster no_host = ideal_cluster();
  no_host.host_link_bandwidth = 0;
  std::vector<std::string> argv = absl::StrSplit(
      kModel + "--use-distributed-optimizer --use-precision-aware-optimizer --optimizer-cpu-offload", ' ',
      absl::SkipEmpty());
  const Arguments a = *validate_layout(*parse_model_flags(argv), 8);
  const absl::StatusOr<Prediction> p = predict(a, 8, no_host);
  ASSERT_FALSE(p.ok());
  EXPECT_NE(p.status().message().find("host_link_bandwidth_GBps"), std::string::npos) << p.status();
}

TEST(Offload, SearchTriesZeroThreeAndOffloadWhereNothingElseFits) {
  // Memory so small that only offloaded optimizer state fits.
  Cluster small = ideal_cluster();
  const Prediction sharded = predicted(kModel + kZero2, 8);
  small.memory_bytes = sharded.memory.total() - 0.5 * sharded.memory.optimizer_state;
  std::vector<std::string> argv = absl::StrSplit(kModel, ' ', absl::SkipEmpty());
  const absl::StatusOr<SearchResult> result = search_layouts(*parse_model_flags(argv), 8, small, {}, 100000);
  ASSERT_TRUE(result.ok()) << result.status();
  bool offloaded = false;
  for (const Prediction& p : result->ranked) offloaded = offloaded || p.offload_fraction > 0;
  EXPECT_TRUE(offloaded);
  const absl::StatusOr<SearchResult> roomy = search_layouts(*parse_model_flags(argv), 8, ideal_cluster(), {}, 100000);
  ASSERT_TRUE(roomy.ok()) << roomy.status();
  bool zero3 = false;
  for (const Prediction& p : roomy->ranked) {
    zero3 = zero3 || p.zero_level == 3;
    EXPECT_EQ(p.offload_fraction, 0.0);  // offload only where nothing else fits
  }
  EXPECT_TRUE(zero3);
}

}  // namespace
}  // namespace gpt::perf
