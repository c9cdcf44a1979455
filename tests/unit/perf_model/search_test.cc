// --search: candidates pass pretrain_gpt's checks, fit in memory, come out fastest first.
#include "perf_model/search.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <map>
#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "perf_model/report.h"

namespace gpt::perf {
namespace {

TEST(PerfModelSearch, RanksFittingLayoutsFastestFirst) {
  absl::StatusOr<Cluster> cluster = load_cluster("dgx-h100", "");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string flags =
      "--num-layers 32 --hidden-size 4096 --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 "
      "--vocab-size 50257 --global-batch-size 128 --bf16 --overlap-grad-reduce";
  absl::StatusOr<Arguments> base = parse_model_flags(absl::StrSplit(flags, ' '));
  ASSERT_TRUE(base.ok()) << base.status();
  absl::StatusOr<SearchResult> result = search_layouts(*base, 16, *cluster, {}, 20);
  ASSERT_TRUE(result.ok()) << result.status();
  EXPECT_GT(result->evaluated, 100);
  EXPECT_LT(result->fitting, result->evaluated);  // some layouts do not fit 80 GB
  ASSERT_EQ(result->ranked.size(), 20u);
  std::set<double> distinct;
  for (size_t i = 0; i < result->ranked.size(); ++i) {
    const Prediction& p = result->ranked[i];
    EXPECT_TRUE(p.fits);
    EXPECT_EQ(p.tensor * p.context * p.pipeline * p.data, 16);
    EXPECT_LE(p.tensor, 8);
    if (i > 0) EXPECT_LE(result->ranked[i - 1].iteration_time, p.iteration_time);
    distinct.insert(p.tflops_per_gpu);
  }
  EXPECT_GT(distinct.size(), 10u);
}

// The search tries each pipeline schedule of a layout: the zero-bubble ones come with their own
// simulated pipeline time and memory (ZB-H1 keeps its slots until W and the W leases on the later
// stages; ZB-V needs no embedding all-reduce), and auto predicts the fastest that fits.
TEST(PerfModelSearch, IncludesTheSchedulesAndTheirMemory) {
  absl::StatusOr<Cluster> cluster = load_cluster("dgx-h100", "");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  const std::string flags =
      "--num-layers 16 --hidden-size 2048 --num-attention-heads 16 --seq-length 2048 --max-position-embeddings 2048 "
      "--vocab-size 50257 --global-batch-size 64 --bf16";
  absl::StatusOr<Arguments> base = parse_model_flags(absl::StrSplit(flags, ' '));
  ASSERT_TRUE(base.ok()) << base.status();
  absl::StatusOr<SearchResult> result = search_layouts(*base, 8, *cluster, {}, 100000);
  ASSERT_TRUE(result.ok()) << result.status();
  std::map<std::string, std::map<std::string, Prediction>> by_layout;  // layout without schedule -> schedule
  for (const Prediction& p : result->ranked) {
    Prediction key = p;
    key.schedule = "";
    by_layout[layout_text(key)][p.schedule] = p;
  }
  int pairs_h1 = 0, pairs_v = 0;
  for (const auto& [layout, schedules] : by_layout) {
    SCOPED_TRACE(layout);
    if (schedules.count("1f1b") && schedules.count("zb-h1")) {
      // Each with its own simulation (faster or not: ZB-H1's order is made for F = B = W, and the
      // model's B and W differ) and memory.
      const Prediction &f = schedules.at("1f1b"), &z = schedules.at("zb-h1");
      EXPECT_NE(z.pipeline_time, f.pipeline_time);
      EXPECT_GE(z.memory.activations, f.memory.activations);
      ++pairs_h1;
    }
    if (schedules.count("interleaved") && schedules.count("zb-v")) {
      // Not necessarily faster: the V puts the embedding and the LM head (with a 50k vocabulary the
      // heaviest stage) on rank 0, and the ZB-V order is made for equal passes.
      EXPECT_NE(schedules.at("zb-v").pipeline_time, schedules.at("interleaved").pipeline_time);
      EXPECT_EQ(schedules.at("zb-v").embedding_sync_time, 0.0) << "the V keeps the tied embedding on one rank";
      EXPECT_GT(schedules.at("interleaved").embedding_sync_time, 0.0);
      ++pairs_v;
    }
  }
  EXPECT_GT(pairs_h1, 10);
  EXPECT_GT(pairs_v, 5);
  // --pipeline-schedule auto predicts the faster of a layout's schedules.
  absl::StatusOr<Arguments> layout = parse_model_flags(absl::StrSplit(
      flags + " --pipeline-model-parallel-size 4 --pipeline-schedule auto --micro-batch-size 1", ' '));
  ASSERT_TRUE(layout.ok()) << layout.status();
  absl::StatusOr<Arguments> validated = validate_layout(*layout, 8);
  ASSERT_TRUE(validated.ok()) << validated.status();
  absl::StatusOr<Prediction> automatic = predict(*validated, 8, *cluster);
  ASSERT_TRUE(automatic.ok()) << automatic.status();
  double fastest = 1e300;
  for (const char* name : {"1f1b", "zb-h1"}) {
    Arguments one = *validated;
    one.pipeline_schedule = name;
    absl::StatusOr<Prediction> p = predict(one, 8, *cluster);
    ASSERT_TRUE(p.ok()) << p.status();
    if (p->fits) fastest = std::min(fastest, p->iteration_time);
  }
  EXPECT_EQ(automatic->iteration_time, fastest);
}

// The margins under the table: each of the best 5 against the next, and those within the cluster's
// model_error of the best named as an order the model cannot tell.
TEST(PerfModelSearch, SaysWhichLayoutsAreWithinTheModelsError) {
  Cluster cluster;
  cluster.name = "test";
  cluster.model_error = 0.05;
  std::vector<Prediction> ranked(6);
  const double times[] = {1.0, 1.02, 1.049, 1.2, 1.3, 1.31};
  for (size_t i = 0; i < ranked.size(); ++i) ranked[i].iteration_time = times[i];
  const std::string text = search_margins(ranked, cluster);
  EXPECT_NE(text.find("The best 5, each against the next: #1 2.0% faster than #2; #2 2.8% faster than #3; "
                      "#3 14.4% faster than #4; #4 8.3% faster than #5."),
            std::string::npos)
      << text;
  EXPECT_NE(text.find("#2 to #3 are within the model's own error of #1 (5%"), std::string::npos) << text;
  cluster.model_error = 0.01;
  EXPECT_NE(search_margins(ranked, cluster).find("#1 leads #2 by more than the model's own error (1%"),
            std::string::npos);
  ranked.resize(2);
  cluster.model_error = 0.05;
  EXPECT_NE(search_margins(ranked, cluster).find("The best 2, each against the next: #1 2.0% faster than #2.\n#2 is within"),
            std::string::npos)
      << search_margins(ranked, cluster);
  ranked.resize(1);
  EXPECT_EQ(search_margins(ranked, cluster), "");
}

TEST(PerfModelSearch, NeedsTheGlobalBatch) {
  absl::StatusOr<Arguments> base = parse_model_flags(absl::StrSplit(
      "--num-layers 2 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 "
      "--vocab-size 128",
      ' '));
  ASSERT_TRUE(base.ok());
  absl::StatusOr<SearchResult> result = search_layouts(*base, 4, *load_cluster("dgx-h100", ""), {}, 5);
  ASSERT_FALSE(result.ok());
  EXPECT_EQ(result.status().message(), "--search needs --global-batch-size (the batch every layout trains)");
}

}  // namespace
}  // namespace gpt::perf
