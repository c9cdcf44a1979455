// The memory plan's closed form against its exact plan: a lower bound in every layout the closed
// form has to bound (recompute modes, TP with SP, CP, pipelines plain and interleaved), since it
// alone decides for layouts too large to enumerate. Both read the allocation's activation lists, so
// with one pipeline stage their activations agree to the byte. Mixture-of-experts layouts too, and
// the closed form's expert parameters by hand, with the fit check refusing experts that cannot fit.
#include <gtest/gtest.h>

#include <string>
#include <utility>
#include <vector>

#include "unit/perf_model/perf_model_fixtures.h"

namespace gpt::perf {
namespace {

const std::string kBase =
    "--num-layers 8 --hidden-size 64 --num-attention-heads 4 --seq-length 32 --max-position-embeddings 32 "
    "--vocab-size 128 --micro-batch-size 1 --global-batch-size 8 --bf16 ";

const std::string kMoe = "--num-experts 8 --moe-router-topk 2 --moe-ffn-hidden-size 32 --moe-aux-loss-coeff 1e-2 ";

TEST(ClosedFormMemory, BoundsTheExactPlanInEveryLayout) {
  const std::vector<std::pair<std::string, int64_t>> layouts = {
      {"", 1},
      {"--recompute-activations", 1},
      {"--recompute-granularity full --recompute-method uniform --recompute-num-layers 3", 1},
      {"--recompute-granularity full --recompute-method block --recompute-num-layers 2", 1},
      {"--tensor-model-parallel-size 2 --sequence-parallel", 2},
      {"--tensor-model-parallel-size 2 --sequence-parallel --recompute-granularity full "
       "--recompute-method uniform --recompute-num-layers 1",
       2},
      {"--context-parallel-size 2", 2},
      {"--pipeline-model-parallel-size 2", 2},
      {"--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2", 2},
      {"--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 1 --recompute-granularity full "
       "--recompute-method block --recompute-num-layers 1",
       2},
      {"--pipeline-model-parallel-size 2 --use-distributed-optimizer", 4},
      {"--pipeline-model-parallel-size 2 --pipeline-schedule zb-h1", 2},
      {"--pipeline-model-parallel-size 2 --pipeline-schedule zb-v", 2},
      {"--pipeline-model-parallel-size 2 --pipeline-schedule zb-v --untie-embeddings-and-output-weights", 2},
      // Mixture of experts (issue 40): expert weights, the MoE stash and the expert-major buffers,
      // by the dropless worst case or the padded capacity, in a layer pattern across stages.
      {kMoe, 1},
      {kMoe + "--recompute-activations", 1},
      {kMoe + "--tensor-model-parallel-size 2 --sequence-parallel --disable-bias-linear", 2},
      {kMoe + "--pipeline-model-parallel-size 2 --moe-layer-freq ([0]*1+[1]*3)*2", 2},
      {kMoe + "--pipeline-model-parallel-size 2 --num-layers-per-virtual-pipeline-stage 2 "
              "--moe-layer-freq ([1]*1+[0]*3)*2",
       2},
      {kMoe + "--disable-bias-linear --swiglu --moe-shared-expert-intermediate-size 48 "
              "--moe-expert-capacity-factor 1.0 --moe-pad-expert-input-to-capacity --moe-router-enable-expert-bias "
              "--moe-router-score-function sigmoid",
       1},
      {kMoe + "--context-parallel-size 2 --moe-expert-capacity-factor 1.5", 2},
  };
  for (const auto& [flags, world] : layouts) {
    SCOPED_TRACE(flags);
    const Arguments a = checked_layout(kBase + flags, world);
    absl::StatusOr<MemoryPlan> plan = plan_memory(a, world, vocabulary_before_data(a));
    ASSERT_TRUE(plan.ok()) << plan.status();
    ASSERT_TRUE(plan->allocated.has_value());
    EXPECT_GT(plan->activations, 0);
    EXPECT_LE(plan->parameters + plan->gradients + plan->optimizer_state + plan->activations,
              plan->allocated->total());
    // One stage without leases or receive buffers: the same lists give the same bytes.
    if (a.pipeline_model_parallel_size == 1) EXPECT_EQ(plan->activations, plan->allocated->activations);
    // With one stage the parameters within the exact plan's alignment padding (the MoE layers'
    // routers and experts counted as such, not as dense MLPs).
    if (a.pipeline_model_parallel_size == 1) {
      EXPECT_LE(plan->parameters, plan->allocated->parameters);
      EXPECT_GE(static_cast<double>(plan->parameters), 0.98 * static_cast<double>(plan->allocated->parameters));
    }
  }
}

// The closed form counts every expert: against the dense model, each MoE layer of the pattern adds
// its router [E, h] and E experts' fc1 [F_e, h] and fc2 [h, F_e] and loses the dense MLP's fc1 and
// fc2 (no linear biases), FP32 parameters; and a model whose experts cannot fit is refused.
TEST(ClosedFormMemory, CountsEveryExpert) {
  const std::string base =
      "--num-layers 4 --hidden-size 512 --ffn-hidden-size 1024 --num-attention-heads 8 --seq-length 64 "
      "--max-position-embeddings 64 --vocab-size 1024 --micro-batch-size 1 --global-batch-size 8 "
      "--disable-bias-linear ";
  const Arguments dense = checked_layout(base, 1);
  const Arguments moe = checked_layout(
      base + "--num-experts 16 --moe-router-topk 2 --moe-ffn-hidden-size 384 --moe-layer-freq ([0]*1+[1]*3)", 1);
  absl::StatusOr<MemoryPlan> dense_plan = plan_memory(dense, 1, vocabulary_before_data(dense));
  absl::StatusOr<MemoryPlan> moe_plan = plan_memory(moe, 1, vocabulary_before_data(moe));
  ASSERT_TRUE(dense_plan.ok()) << dense_plan.status();
  ASSERT_TRUE(moe_plan.ok()) << moe_plan.status();
  const int64_t h = 512, ffn = 1024, experts = 16, expert_ffn = 384, moe_layers = 3;
  const int64_t added = moe_layers * (experts * h + experts * 2 * h * expert_ffn - 2 * h * ffn);
  EXPECT_EQ(moe_plan->parameters - dense_plan->parameters, 4 * added);
  // 256 experts of 8192 over 4 layers of h 4096: 2 x 4096 x 8192 x 256 x 4 = 64 Gi parameters, far
  // beyond any node; the dense model of the same shape fits a large one.
  const std::string big = "--num-layers 4 --hidden-size 4096 --ffn-hidden-size 8192 --num-attention-heads 32 "
                          "--seq-length 64 --max-position-embeddings 64 --vocab-size 1024 --micro-batch-size 1 "
                          "--global-batch-size 8 --disable-bias-linear ";
  absl::StatusOr<MemoryPlan> huge = plan_memory(checked_layout(big + "--num-experts 256", 1), 1, 1024);
  ASSERT_TRUE(huge.ok()) << huge.status();
  EXPECT_GT(huge->parameters, int64_t{4} * 4 * 2 * 4096 * 8192 * 256);
  absl::StatusOr<MemoryPlan> small = plan_memory(checked_layout(big, 1), 1, 1024);
  ASSERT_TRUE(small.ok()) << small.status();
  EXPECT_LT(small->parameters, int64_t{4} << 30);
  // The fit check on an 80 GiB GPU: the dense model passes, the MoE one is refused naming its experts.
  const MemoryBudget gpu{.gpu = true, .device_bytes = int64_t{80} << 30, .host_bytes = int64_t{1} << 40};
  EXPECT_TRUE(check_memory_plan(*small, checked_layout(big, 1), gpu).ok());
  const absl::Status refused = check_memory_plan(*huge, checked_layout(big + "--num-experts 256", 1), gpu);
  EXPECT_FALSE(refused.ok());
  EXPECT_NE(std::string(refused.message()).find("--num-experts 256"), std::string::npos) << refused;
}

}  // namespace
}  // namespace gpt::perf
