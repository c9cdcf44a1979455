// Where expert parameters live under expert parallelism, from the flags (EP-DESIGN.md): each rank's
// shard plan settings and expert share against Megatron's expert rank order written out here
// (expert rank = etp + ETP (ep + EP (edp + EDP pp))), the one-rank layout and EP folded onto TP
// (ETP x EP = TP) keeping the experts with the dense parameters; the memory plan holding E / EP experts per rank
// (closed form and exact plan), their optimizer state over expert data parallelism; and
// --num-distributed-optimizer-instances refused with experts apart.
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/param_registry.h"
#include "train/args/arguments.h"
#include "train/configs.h"
#include "train/memory_plan.h"

namespace gpt {
namespace {

std::vector<std::string> moe_flags(std::vector<std::string> extra) {
  std::vector<std::string> flags = {"pretrain_gpt", "--mock-data", "--vocab-size", "512", "--num-layers", "2",
                                    "--hidden-size", "64", "--num-attention-heads", "4", "--seq-length", "32",
                                    "--max-position-embeddings", "32", "--micro-batch-size", "1",
                                    "--global-batch-size", "8", "--train-iters", "5", "--lr", "1e-3",
                                    "--num-experts", "8", "--moe-router-topk", "2", "--moe-ffn-hidden-size", "32",
                                    "--disable-bias-linear"};
  flags.insert(flags.end(), extra.begin(), extra.end());
  return flags;
}

Arguments validated(int64_t world, std::vector<std::string> extra) {
  absl::StatusOr<Arguments> parsed = parse_arguments(moe_flags(std::move(extra)));
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  EXPECT_EQ(std::string(prepare_arguments(*parsed).message()), "");
  EXPECT_EQ(std::string(prepare_for_world(*parsed, world).message()), "");
  return *parsed;
}

struct Expected {
  int etp, ep, edp;
};
// Megatron's expert RankGenerator, default order, for world rank r.
Expected expert_place(int r, int etp, int ep, int edp) {
  return {r % etp, (r / etp) % ep, (r / (etp * ep)) % edp};
}

TEST(ExpertPlacement, ShardPlanSettingsFollowTheExpertGrid) {
  struct Case {
    int64_t world, tp, ep, etp;
    bool apart;
  };
  for (const Case c : {Case{8, 1, 2, 1, true}, Case{8, 1, 4, 1, true}, Case{8, 2, 2, 2, true}, Case{8, 2, 1, 1, true},
                       Case{4, 2, 2, 1, false}, Case{4, 1, 1, 1, false}, Case{4, 2, 1, 2, false}}) {
    SCOPED_TRACE("world " + std::to_string(c.world) + " tp " + std::to_string(c.tp) + " ep " + std::to_string(c.ep) +
                 " etp " + std::to_string(c.etp));
    std::vector<std::string> extra = {"--use-distributed-optimizer", "--expert-model-parallel-size",
                                      std::to_string(c.ep), "--expert-tensor-parallel-size", std::to_string(c.etp)};
    if (c.tp > 1) extra.insert(extra.end(), {"--tensor-model-parallel-size", std::to_string(c.tp), "--sequence-parallel"});
    const Arguments args = validated(c.world, extra);
    const GridShape shape = grid_shape_from(args, c.world);
    const int edp = static_cast<int>(c.world / (c.etp * c.ep));
    for (int r = 0; r < c.world; ++r) {
      const GridCoordinates coordinates = grid_coordinates(shape, r);
      const ShardPlanConfig config = shard_plan_config_from(args, shape, coordinates);
      const Expected e = expert_place(r, static_cast<int>(c.etp), static_cast<int>(c.ep), edp);
      EXPECT_EQ(config.separate_experts, c.apart) << "rank " << r;
      EXPECT_EQ(config.expert_tensor_parallel_size, c.etp);
      EXPECT_EQ(config.expert_tensor_parallel_rank, e.etp) << "rank " << r;
      EXPECT_EQ(config.expert_data_parallel_size, c.apart ? edp : 1);
      EXPECT_EQ(config.expert_data_parallel_rank, c.apart ? e.edp : 0) << "rank " << r;
      const ExpertShare share = expert_share_from(shape, coordinates);
      EXPECT_EQ(share.size, c.ep);
      EXPECT_EQ(share.rank, e.ep) << "rank " << r;
    }
  }
}

// The parameter elements of the model's routed experts and of everything else.
std::pair<int64_t, int64_t> dense_and_expert_elements(const Arguments& args) {
  int64_t dense = 0, experts = 0;
  for (const ParamSpec& spec : build_param_specs(model_config_from(args))) {
    (spec.expert >= 0 ? experts : dense) += spec.global_numel();
  }
  return {dense, experts};
}

TEST(ExpertPlacement, MemoryPlanHoldsTheRanksExperts) {
  // World 4, DP 4: EP 1, 2 and 4, with the distributed optimizer (BF16: 2-byte parameters, FP32
  // gradients, master weights and two moments).
  const std::vector<std::string> common = {"--bf16", "--use-distributed-optimizer"};
  for (int64_t ep : {1, 2, 4}) {
    SCOPED_TRACE("ep " + std::to_string(ep));
    std::vector<std::string> extra = common;
    extra.insert(extra.end(), {"--expert-model-parallel-size", std::to_string(ep)});
    const Arguments args = validated(4, extra);
    absl::StatusOr<MemoryPlan> plan = plan_memory(args, 4, 512);
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(plan->allocated.has_value());
    const auto [dense, experts] = dense_and_expert_elements(args);
    const int64_t held = dense + experts / ep;
    // Parameters: the held elements, within the alignment (64 elements a parameter) and bucket
    // padding of the exact plan; the closed form below it.
    EXPECT_GE(plan->allocated->parameters, 2 * held);
    EXPECT_LE(plan->allocated->parameters, 2 * (held + 64 * 64 + 2 * 512));
    EXPECT_LE(plan->parameters, plan->allocated->parameters);
    EXPECT_GE(plan->parameters, 2 * held);
    // Optimizer state: 12 bytes of each owned element; the dense ones over DP 4, the experts over
    // EDP = 4 / EP: (dense + experts / EP / (4 / EP)) / 4 = (dense + experts) / 4 whatever EP.
    const int64_t owned = dense / 4 + experts / 4;
    EXPECT_GE(plan->optimizer_state, 12 * owned);
    EXPECT_LE(plan->optimizer_state, 12 * (owned + 8));
    EXPECT_GE(plan->allocated->optimizer_state, 12 * owned);
    EXPECT_LE(plan->allocated->optimizer_state, 12 * (owned + 64 * 64 + 2 * 512));
  }
}

TEST(ExpertPlacement, OptimizerInstancesRefusedWithExpertsApart) {
  absl::StatusOr<Arguments> parsed =
      parse_arguments(moe_flags({"--use-distributed-optimizer", "--num-distributed-optimizer-instances", "2",
                                 "--expert-model-parallel-size", "2"}));
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  const std::string message(prepare_arguments(*parsed).message());
  EXPECT_NE(message.find("--num-distributed-optimizer-instances 2 with --expert-model-parallel-size 2"),
            std::string::npos)
      << message;
}

}  // namespace
}  // namespace gpt
