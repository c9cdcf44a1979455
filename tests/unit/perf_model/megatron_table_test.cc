// Acceptance of the calibrated dgx-h100 description: Megatron-Core's published H100 weak-scaling
// table (Megatron-LM README, "Training speed and scalability"; vocabulary 131072, sequence 4096,
// micro batch 1, DP 48, distributed optimizer, sequence parallelism with TP > 1, the overlap of DP,
// TP and PP communication the README lists, no recompute, no interleaving) predicted within 10% of
// the published TFLOP/s per GPU in every row, with one set of cluster parameters for all rows.
#include <gtest/gtest.h>

#include <cmath>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "perf_model/predict.h"

namespace gpt::perf {
namespace {

struct Row {
  const char* params;
  int heads, hidden, layers, tp, pp, batch;
  double tflops;
};

const Row kRows[] = {
    {"1.7B", 16, 2048, 24, 1, 1, 192, 408.8},        {"7.1B", 32, 4096, 30, 2, 1, 192, 465.9},
    {"16B", 48, 6144, 32, 4, 1, 192, 489.1},         {"32B", 56, 7168, 48, 8, 1, 192, 459.6},
    {"70B", 64, 8192, 84, 8, 2, 384, 419.7},         {"119B", 80, 10240, 92, 8, 4, 768, 420.5},
    {"177B", 96, 12288, 96, 8, 6, 1152, 432.8},      {"314B", 128, 16384, 96, 8, 8, 1536, 474.4},
    {"462B", 144, 18432, 112, 8, 16, 3072, 459.9},
};

TEST(MegatronH100Table, EveryRowWithinTenPercent) {
  absl::StatusOr<Cluster> cluster = load_cluster("dgx-h100", "");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  RunOptions options;
  options.tp_comm_overlap = true;
  options.implementation = Implementation::kMegatron;  // Megatron's runs: its stash and SP re-gather
  double total_error = 0;
  for (const Row& row : kRows) {
    const int64_t world = static_cast<int64_t>(row.tp) * row.pp * 48;
    const std::string flags = absl::StrCat(
        "--num-layers ", row.layers, " --hidden-size ", row.hidden, " --num-attention-heads ", row.heads,
        " --seq-length 4096 --max-position-embeddings 4096 --vocab-size 131072 --micro-batch-size 1"
        " --global-batch-size ", row.batch, " --tensor-model-parallel-size ", row.tp,
        " --pipeline-model-parallel-size ", row.pp, row.tp > 1 ? " --sequence-parallel" : "",
        " --use-distributed-optimizer --overlap-grad-reduce --overlap-param-gather --bf16");
    absl::StatusOr<Arguments> parsed = parse_model_flags(absl::StrSplit(flags, ' '));
    ASSERT_TRUE(parsed.ok()) << parsed.status();
    absl::StatusOr<Arguments> args = validate_layout(*parsed, world);
    ASSERT_TRUE(args.ok()) << row.params << ": " << args.status();
    absl::StatusOr<Prediction> p = predict(*args, world, *cluster, options);
    ASSERT_TRUE(p.ok()) << p.status();
    // Megatron's own FLOP count for the table: 72 B s l h^2 (1 + s / (6h) + V / (12 l h)).
    const double h = row.hidden, l = row.layers, s = 4096, V = 131072;
    EXPECT_NEAR(p->model_flops, 72 * row.batch * s * l * h * h * (1 + s / (6 * h) + V / (12 * l * h)),
                1e-9 * p->model_flops);
    const double error = (p->tflops_per_gpu - row.tflops) / row.tflops;
    total_error += std::abs(error);
    EXPECT_LT(std::abs(error), 0.10) << row.params << ": predicted " << p->tflops_per_gpu << " TFLOP/s per GPU, "
                                     << "published " << row.tflops;
    std::printf("%-5s predicted %6.1f published %6.1f error %+5.1f%%\n", row.params, p->tflops_per_gpu, row.tflops,
                100 * error);
  }
  const double mean = total_error / std::size(kRows);
  std::printf("mean absolute error %.1f%%\n", 100 * mean);
  EXPECT_LT(mean, 0.05);
}

}  // namespace
}  // namespace gpt::perf
