// MoE layouts in the performance model (issue 41; moe_ops.h, expert_layout.h): the routed experts'
// work per rank, the dispatcher's traffic, the expert grid's checks, its memory and gradient
// traffic, and the search over EP and ETP. Hand-computed figures on a small model.
#include <gtest/gtest.h>

#include <string>

#include "perf_model/compute_cost.h"
#include "perf_model/moe_ops.h"
#include "perf_model/search.h"
#include "train/configs.h"
#include "unit/perf_model/perf_model_fixtures.h"

namespace gpt::perf {
namespace {

// 4 layers, h 256, 8 experts of F 512 (SwiGLU), top-2, s 256, BF16.
const std::string kMoe =
    "--num-layers 4 --hidden-size 256 --num-attention-heads 4 --ffn-hidden-size 512 --seq-length 256 "
    "--max-position-embeddings 256 --vocab-size 1024 --swiglu --disable-bias-linear --bf16 --num-experts 8 "
    "--moe-router-topk 2 --micro-batch-size 1 --global-batch-size 16 ";
constexpr double kH = 256, kF = 512, kK = 2, kE = 8, kRows = 256, kBytes = 2, kLayers = 4;

LayerOps moe_ops(int64_t tp, int64_t ep, int64_t etp, bool all_to_all, double imbalance = 1.0,
                 bool route_gathered = true) {
  const Arguments a = checked_layout(
      kMoe + "--tensor-model-parallel-size " + std::to_string(tp) + (tp > 1 ? " --sequence-parallel" : ""), 8);
  RankShape shape;
  shape.tensor_parallel = tp;
  shape.sequence_parallel = tp > 1;
  shape.micro_batch = 1;
  shape.expert = {.expert_model = ep,
                  .expert_tensor = etp,
                  .all_to_all = all_to_all,
                  .imbalance = imbalance,
                  .route_gathered_rows = route_gathered};
  return layer_ops(model_config_from(a), shape, /*moe_layer=*/true);
}

double expert_gemm_flops(const std::vector<Op>& ops) {
  double flops = 0;
  for (const Op& op : ops) {
    if (op.kind == OpKind::kGemm && op.name.starts_with("experts")) flops += 2 * op.count * op.m * op.n * op.k;
  }
  return flops;
}

const Op* find(const std::vector<Op>& ops, const std::string& name) {
  for (const Op& op : ops) {
    if (op.name == name) return &op;
  }
  return nullptr;
}

TEST(PerfModelMoe, ExpertWorkPerRankIsTheSameOnEveryGrid) {
  // Forward: the rank computes ETP R k pairs (R = s / TP owned rows) at 1 / ETP of fc1's 2F and
  // fc2's F, 2 FLOPs per multiply-add: 2 R k h 3F, whatever EP and ETP; backward twice that.
  for (int64_t tp : {1, 2}) {
    const double expected = 2 * (kRows / static_cast<double>(tp)) * kK * kH * 3 * kF;
    for (int64_t ep : {1, 2, 4, 8}) {
      for (int64_t etp : {int64_t{1}, tp}) {
        const LayerOps ops = moe_ops(tp, ep, etp, true);
        EXPECT_NEAR(expert_gemm_flops(ops.forward), expected, 1e-6 * expected)
            << "TP " << tp << " EP " << ep << " ETP " << etp;
        EXPECT_NEAR(expert_gemm_flops(ops.backward), 2 * expert_gemm_flops(ops.forward), 1e-6 * expected);
        // The grouped GEMM runs E / EP local experts of R ETP k / (E / EP) rows each.
        const Op* fc1 = find(ops.forward, "experts fc1");
        ASSERT_NE(fc1, nullptr);
        EXPECT_DOUBLE_EQ(fc1->count, kE / static_cast<double>(ep));
        EXPECT_DOUBLE_EQ(fc1->m, etp * (kRows / static_cast<double>(tp)) * kK / (kE / static_cast<double>(ep)));
        EXPECT_DOUBLE_EQ(fc1->n, 2 * kF / static_cast<double>(etp));
      }
    }
  }
}

TEST(PerfModelMoe, AllToAllMovesTheRoutedPairsTimesTheImbalance) {
  const LayerOps ops = moe_ops(2, 4, 2, true, 1.5);
  const double pairs_bytes = 1.5 * (kRows / 2) * kK * kH * kBytes;  // f R k h t
  const Op* dispatch = find(ops.forward, "dispatch all-to-all");
  ASSERT_NE(dispatch, nullptr);
  EXPECT_EQ(dispatch->group, CommGroup::kExpertModel);
  EXPECT_DOUBLE_EQ(dispatch->bytes, pairs_bytes);
  const Op* gather = find(ops.forward, "dispatch all-gather (ETP)");
  ASSERT_NE(gather, nullptr);
  EXPECT_DOUBLE_EQ(gather->bytes, 2 * pairs_bytes);
  ASSERT_NE(find(ops.forward, "combine all-to-all"), nullptr);
  ASSERT_NE(find(ops.backward, "dispatch backward all-to-all"), nullptr);
  // Expert rows scale with the imbalance: the busiest rank's.
  EXPECT_DOUBLE_EQ(find(ops.forward, "experts fc1")->m, 1.5 * 2 * (kRows / 2) * kK / (kE / 4));
  // No EP: no all-to-all.
  EXPECT_EQ(find(moe_ops(2, 1, 2, true).forward, "dispatch all-to-all"), nullptr);
}

TEST(PerfModelMoe, OneRankLayoutIsTodaysTensorParallelExchange) {
  // EP 1, ETP = TP, allgather: the router's TP gather serves the experts; the partial sums are
  // reduce-scattered over the exchange group (the TP group) as [s, b, h].
  const LayerOps ops = moe_ops(2, 1, 2, false);
  EXPECT_EQ(find(ops.forward, "dispatch all-gather"), nullptr);
  ASSERT_NE(find(ops.forward, "all-gather ln2"), nullptr);
  const Op* combine = find(ops.forward, "combine reduce-scatter");
  ASSERT_NE(combine, nullptr);
  EXPECT_DOUBLE_EQ(combine->bytes, kRows * kH * kBytes);
  // EP 2 x ETP 2: the exchange group's 4 ranks gather 4 R rows.
  const Op* gather = find(moe_ops(2, 2, 2, false).forward, "dispatch all-gather");
  ASSERT_NE(gather, nullptr);
  EXPECT_DOUBLE_EQ(gather->bytes, 4 * (kRows / 2) * kH * kBytes);
  EXPECT_EQ(gather->group, CommGroup::kExpertExchange);
}

TEST(PerfModelMoe, ExpertParametersPerRank) {
  const Arguments a = checked_layout(kMoe, 8);
  const ModelConfig c = model_config_from(a);
  // E / EP experts of h (2F + F) / ETP each (no biases).
  EXPECT_DOUBLE_EQ(expert_parameters_per_rank(c, 1, 1), kE * kH * 3 * kF);
  EXPECT_DOUBLE_EQ(expert_parameters_per_rank(c, 4, 2), kE / 4 * kH * 3 * kF / 2);
}

TEST(PerfModelMoe, RefusesAnExpertGridThatDoesNotFit) {
  const auto refusal = [](const std::string& flags, int64_t world) {
    std::vector<std::string> argv = absl::StrSplit(kMoe + flags, ' ', absl::SkipEmpty());
    absl::StatusOr<Arguments> parsed = parse_model_flags(argv);
    EXPECT_TRUE(parsed.ok()) << parsed.status();
    absl::StatusOr<Arguments> validated = validate_layout(*parsed, world);
    return validated.ok() ? std::string() : std::string(validated.status().message());
  };
  EXPECT_NE(refusal("--expert-model-parallel-size 3", 8)
                .find("--num-experts (8) must be divisible by "
                      "--expert-model-parallel-size (3)"),
            std::string::npos);
  EXPECT_NE(refusal("--expert-model-parallel-size 4 --pipeline-model-parallel-size 2", 4)
                .find("world size (4) must be divisible by --expert-tensor-parallel-size (1) x "
                      "--expert-model-parallel-size (4) x --pipeline-model-parallel-size (2)"),
            std::string::npos);
  EXPECT_NE(refusal("--expert-model-parallel-size 0", 4).find("--expert-model-parallel-size must be at least 1"),
            std::string::npos);
  EXPECT_EQ(refusal("--expert-model-parallel-size 8", 8), "");
}

TEST(PerfModelMoe, MemoryAndGradientTrafficFollowTheExpertGrid) {
  const Cluster cluster = ideal_cluster_base();
  const std::string flags = kMoe + "--use-distributed-optimizer ";
  const Prediction one = predict_layout(flags, 8, cluster);
  const Prediction ep4 = predict_layout(flags + "--expert-model-parallel-size 4", 8, cluster);
  const Prediction ep8 = predict_layout(flags + "--expert-model-parallel-size 8", 8, cluster);
  EXPECT_EQ(ep4.expert_data, 2);
  EXPECT_EQ(ep8.expert_data, 1);
  // BF16 parameters: 3 / 4 of the experts leave each rank at EP 4.
  const double experts = kLayers * kE * kH * 3 * kF;
  EXPECT_NEAR(one.memory.parameters - ep4.memory.parameters, kBytes * experts * 3 / 4, 1.0);
  EXPECT_DOUBLE_EQ(ep4.memory.expert_parameters, experts / 4);
  // The distributed optimizer's expert shard is experts / (EP x EDP) per rank: the same on every grid.
  EXPECT_NEAR(ep4.memory.optimizer_state, one.memory.optimizer_state, 1e-6 * one.memory.optimizer_state);
  EXPECT_NEAR(ep8.memory.optimizer_state, one.memory.optimizer_state, 1e-6 * one.memory.optimizer_state);
  // Expert gradients are reduced over EDP: none at EDP 1.
  EXPECT_GT(one.expert_dp_comm_time, 0.0);
  EXPECT_GT(ep4.expert_dp_comm_time, 0.0);
  EXPECT_EQ(ep8.expert_dp_comm_time, 0.0);
  EXPECT_GT(ep4.ep_comm_time, 0.0);
}

TEST(PerfModelMoe, StagesCarryTheirOwnMoeLayers) {
  // 4 layers on 2 stages: the MoE layers together on the last stage, or one on each. The same mean
  // layer; the concentrated pattern's busiest stage runs two MoE layers, so its pipeline is slower.
  const Cluster cluster = ideal_cluster_base();
  const std::string flags = kMoe + "--pipeline-model-parallel-size 2 --moe-layer-freq ";
  const Prediction together = predict_layout(flags + "([0]*2+[1]*2)", 2, cluster);
  const Prediction spread = predict_layout(flags + "([0]+[1])*2", 2, cluster);
  EXPECT_DOUBLE_EQ(together.layer.forward.total(), spread.layer.forward.total());
  EXPECT_GT(together.pipeline_time, spread.pipeline_time * 1.01);
  // One stage alone: the stage of two MoE layers costs what two MoE layers do.
  const Arguments a = checked_layout(flags + "([0]*2+[1]*2)", 2);
  RankShape shape;
  shape.micro_batch = 1;
  const ModelConfig c = model_config_from(a);
  const double moe = kind_layer_cost(c, shape, cluster, true).forward.total();
  const double dense = kind_layer_cost(c, shape, cluster, false).forward.total();
  EXPECT_GT(moe, dense);
  EXPECT_NEAR(together.layer.forward.total(), (moe + dense) / 2, 1e-12);
}

TEST(PerfModelMoe, SearchTriesTheExpertGrid) {
  std::vector<std::string> argv = absl::StrSplit(kMoe + "--moe-token-dispatcher-type alltoall", ' ', absl::SkipEmpty());
  absl::StatusOr<Arguments> base = parse_model_flags(argv);
  ASSERT_TRUE(base.ok()) << base.status();
  absl::StatusOr<SearchResult> result = search_layouts(*base, 4, ideal_cluster_base(), {}, 100000);
  ASSERT_TRUE(result.ok()) << result.status();
  bool expert_parallel = false, folded = false;
  for (const Prediction& p : result->ranked) {
    EXPECT_EQ(4 % (p.expert_model * p.expert_tensor * p.pipeline), 0);
    EXPECT_EQ(p.expert_data, 4 / (p.expert_model * p.expert_tensor * p.pipeline));
    expert_parallel = expert_parallel || p.expert_model > 1;
    folded = folded || (p.tensor > 1 && p.expert_tensor == 1);
  }
  EXPECT_TRUE(expert_parallel);
  EXPECT_TRUE(folded);
  // A given EP is kept.
  Arguments fixed = *base;
  fixed.expert_model_parallel_size = 2;
  fixed.given.insert("--expert-model-parallel-size");
  absl::StatusOr<SearchResult> narrowed = search_layouts(fixed, 4, ideal_cluster_base(), {}, 100000);
  ASSERT_TRUE(narrowed.ok()) << narrowed.status();
  ASSERT_FALSE(narrowed->ranked.empty());
  for (const Prediction& p : narrowed->ranked) EXPECT_EQ(p.expert_model, 2);
}

}  // namespace
}  // namespace gpt::perf
