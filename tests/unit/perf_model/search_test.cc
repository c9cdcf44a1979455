// --search: candidates pass pretrain_gpt's checks, fit in memory, come out fastest first.
#include "perf_model/search.h"

#include <gtest/gtest.h>

#include <set>
#include <string>
#include <vector>

#include "absl/strings/str_split.h"

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
