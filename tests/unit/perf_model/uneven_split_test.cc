// --search with a pipeline that does not divide the layers: Megatron's first / last stage layer
// counts (--decoder-first/last-pipeline-num-layers), the most even split, predicted stage by stage.
#include <gtest/gtest.h>

#include <string>

#include "absl/strings/str_split.h"
#include "core/check.h"
#include "perf_model/report.h"
#include "perf_model/search.h"

namespace gpt::perf {
namespace {

TEST(PerfModelUnevenSplit, MostEvenSplit) {
  // 32 layers on 3 stages: 11 / 11 / 10 (the largest stage 11, the last lighter: it has the head).
  UnevenSplit s = most_even_split(32, 3);
  EXPECT_EQ(s.first, 11);
  EXPECT_EQ(s.middle, 11);
  EXPECT_EQ(s.last, 10);
  // 30 on 4: 7 / 8 / 8 / 7 (the largest 8 either way; the ends lighter).
  s = most_even_split(30, 4);
  EXPECT_EQ(s.first, 7);
  EXPECT_EQ(s.middle, 8);
  EXPECT_EQ(s.last, 7);
  s = most_even_split(5, 2);
  EXPECT_EQ(s.first, 3);
  EXPECT_EQ(s.last, 2);
  // Nothing to do where the pipeline divides the layers, or with fewer layers than stages.
  EXPECT_EQ(most_even_split(32, 4).first, 0);
  EXPECT_EQ(most_even_split(2, 3).first, 0);
  EXPECT_EQ(most_even_split(7, 1).first, 0);
}

Arguments parsed(const std::string& flags) {
  absl::StatusOr<Arguments> a = parse_model_flags(absl::StrSplit(flags, ' '));
  GPT_CHECK(a.ok()) << a.status();
  return *a;
}

const char* const kModel =
    "--num-layers 32 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
    "--vocab-size 1024 --global-batch-size 48 --bf16";  // a small head: the stages are their layers

// Three GPUs, each its own node on a slow network: data parallelism's gradient traffic (and ZeRO's)
// costs more than the pipeline's small activations, so PP 3 is fastest, and 3 does not divide 32.
Cluster slow_network() {
  absl::StatusOr<Cluster> cluster = load_cluster("dgx-h100", "");
  GPT_CHECK(cluster.ok()) << cluster.status();
  cluster->gpus_per_node = 1;
  cluster->compute_slots_per_node = 1;
  cluster->inter_node_bandwidth = 10e9;  // 10 GB/s
  return *cluster;
}

TEST(PerfModelUnevenSplit, SearchReturnsTheUnevenSplitWhereItIsFaster) {
  const Cluster cluster = slow_network();
  absl::StatusOr<SearchResult> result = search_layouts(parsed(kModel), 3, cluster, {}, 100000);
  ASSERT_TRUE(result.ok()) << result.status();
  ASSERT_FALSE(result->ranked.empty());
  const Prediction& best = result->ranked.front();
  SCOPED_TRACE(layout_text(best));
  EXPECT_EQ(best.pipeline, 3);
  EXPECT_EQ(best.first_stage_layers, 11);
  EXPECT_EQ(best.last_stage_layers, 10);
  EXPECT_NE(layout_text(best).find("layers first 11, last 10"), std::string::npos);
  // Faster than every layout without a pipeline (DP 3, every ZeRO level), which the search also ranked.
  bool any_data_parallel = false;
  for (const Prediction& p : result->ranked) {
    if (p.pipeline != 1) continue;
    any_data_parallel = true;
    EXPECT_LT(best.iteration_time, p.iteration_time) << layout_text(p);
  }
  EXPECT_TRUE(any_data_parallel);
}

// The split is priced stage by stage: its busiest rank holds 11 layers, and a worse split of the
// same layout (12 / 10 / 10) is slower by about what one more layer on the busiest stage costs in
// 1F1B's steady state (m + p - 1 forward-backward passes of it).
TEST(PerfModelUnevenSplit, PredictsEachStagesLayers) {
  absl::StatusOr<Cluster> cluster = load_cluster("dgx-h100", "");  // one node: NVLink's transfers are short
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string layout = std::string(kModel) +
                             " --pipeline-model-parallel-size 3 --micro-batch-size 1 --pipeline-schedule 1f1b "
                             "--decoder-last-pipeline-num-layers 10 --decoder-first-pipeline-num-layers ";
  absl::StatusOr<Arguments> even = validate_layout(parsed(layout + "11"), 3);
  absl::StatusOr<Arguments> worse = validate_layout(parsed(layout + "12"), 3);
  ASSERT_TRUE(even.ok()) << even.status();
  ASSERT_TRUE(worse.ok()) << worse.status();
  absl::StatusOr<Prediction> a = predict(*even, 3, *cluster), b = predict(*worse, 3, *cluster);
  ASSERT_TRUE(a.ok() && b.ok());
  const double layer = a->layer.forward.total() + a->layer.backward.total();  // no recompute
  const double m = static_cast<double>(a->microbatches), p = 3;
  EXPECT_EQ(a->microbatches, 48);
  // The first stage of the worse split: one layer more on the critical path of every microbatch.
  EXPECT_NEAR(b->pipeline_time - a->pipeline_time, m * layer, 0.25 * m * layer);
  // The even split's makespan: at least m passes of its busiest stage (11 layers) and about
  // (m + p - 1) of them (the embedding, the head and the p2p transfers besides).
  EXPECT_GT(a->pipeline_time, m * 11 * layer);
  EXPECT_LT(a->pipeline_time, (m + p - 1) * 11 * layer * 1.25);
}

}  // namespace
}  // namespace gpt::perf
