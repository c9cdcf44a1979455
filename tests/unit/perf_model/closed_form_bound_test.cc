// The memory plan's closed form against its exact plan: a lower bound in every layout the closed
// form has to bound (recompute modes, TP with SP, CP, pipelines plain and interleaved), since it
// alone decides for layouts too large to enumerate. Both read the allocation's activation lists, so
// with one pipeline stage their activations agree to the byte.
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
  }
}

}  // namespace
}  // namespace gpt::perf
