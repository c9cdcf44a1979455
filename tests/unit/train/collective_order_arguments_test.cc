// validate_for_world's collective-order proof for MoE layouts (train/args/collective_order_arguments.h):
// a MoE pipeline layout passes start-up with it; an expert grid Megatron refuses is refused in one
// line naming the flags; and a layout whose proof fails names the group.
#include "train/args/collective_order_arguments.h"

#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "train/args/arguments.h"

namespace gpt {
namespace {

using ::testing::HasSubstr;

Arguments moe_arguments(const std::vector<std::string>& extra) {
  std::vector<std::string> line = {"pretrain_gpt",
                                   "--num-layers",
                                   "4",
                                   "--hidden-size",
                                   "64",
                                   "--num-attention-heads",
                                   "4",
                                   "--seq-length",
                                   "32",
                                   "--max-position-embeddings",
                                   "32",
                                   "--micro-batch-size",
                                   "1",
                                   "--global-batch-size",
                                   "8",
                                   "--train-iters",
                                   "2",
                                   "--lr",
                                   "1e-4",
                                   "--mock-data",
                                   "--vocab-size",
                                   "512",
                                   "--num-experts",
                                   "4",
                                   "--moe-router-topk",
                                   "2",
                                   "--disable-bias-linear"};
  line.insert(line.end(), extra.begin(), extra.end());
  absl::StatusOr<Arguments> parsed = parse_arguments(line);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return Arguments{};
  const absl::Status prepared = prepare_arguments(*parsed);
  EXPECT_TRUE(prepared.ok()) << prepared;
  return *parsed;
}

TEST(CollectiveOrderArguments, MoePipelineLayoutsPassStartUp) {
  for (const std::vector<std::string>& flags :
       {std::vector<std::string>{"--pipeline-model-parallel-size", "2"},
        std::vector<std::string>{"--pipeline-model-parallel-size", "2", "--num-layers-per-virtual-pipeline-stage", "1",
                                 "--overlap-grad-reduce", "--use-distributed-optimizer"},
        std::vector<std::string>{"--pipeline-model-parallel-size", "2", "--pipeline-schedule", "zb-h1",
                                 "--moe-token-dispatcher-type", "alltoall", "--tensor-model-parallel-size", "2",
                                 "--sequence-parallel"},
        std::vector<std::string>{"--pipeline-model-parallel-size", "2", "--moe-layer-freq", "2",
                                 "--use-tp-pp-dp-mapping", "--context-parallel-size", "2",
                                 "--expert-model-parallel-size", "2"}}) {
    Arguments a = moe_arguments(flags);
    const absl::Status status = prepare_for_world(a, 8);
    EXPECT_TRUE(status.ok()) << status << " for " << flags[2];
    // The proof itself, on the same arguments.
    EXPECT_TRUE(validate_collective_order(a, 8, static_cast<int>(num_microbatches(a, 8))).ok());
  }
}

// EP 2 over PP 2 x DP 4 with --use-tp-pp-dp-mapping: the expert grid puts ranks on other stages
// than the dense grid (Megatron refuses it). Called directly: the flags' own rules refuse EP > 1
// until the expert grid exists.
TEST(CollectiveOrderArguments, RefusesAnExpertGridAcrossStages) {
  Arguments a = moe_arguments({"--pipeline-model-parallel-size", "2", "--use-tp-pp-dp-mapping"});
  a.expert_model_parallel_size = 2;
  const absl::Status status = validate_collective_order(a, 8, static_cast<int>(num_microbatches(a, 8)));
  ASSERT_FALSE(status.ok());
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("--expert-model-parallel-size 2 with the 1f1b schedule: collective order: the expert grid "
                        "(ETP 1 x EP 2) puts world rank 1 on pipeline stage 0 and the dense grid (TP 1 x CP 1) on "
                        "stage 1"));
  EXPECT_EQ(std::string(status.message()).find('\n'), std::string::npos);
  // The default order aligns the stages: EP 2 proven for every schedule auto may choose.
  a.use_tp_pp_dp_mapping = false;
  a.pipeline_schedule = "auto";
  EXPECT_TRUE(validate_collective_order(a, 8, static_cast<int>(num_microbatches(a, 8))).ok());
}

}  // namespace
}  // namespace gpt
