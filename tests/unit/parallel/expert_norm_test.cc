// The gradient norm and the zero count under expert parallelism (optim/grad_clip.h's NormGroups,
// EP-DESIGN.md) under mpirun -np 4: a DP 4 world (TP 1) whose expert grid is ETP 1 x EP 2 x EDP 2
// (expert rank = ep + 2 edp: the experts' 'tp-ep-pp' groups are {0, 1}, {2, 3} and their
// data-parallel groups {0, 2}, {1, 3}, which the test grid's tensor and data groups of a TP 2 x DP 2
// shape hold). Each rank holds the dense parameters and its two of the four experts, gradients set
// from the global element alone; with and without the distributed optimizer (dense shards over the
// 4 ranks, expert shards over EDP) the norm and the zero count must be those of the whole model
// counted once, computed here in double.
#include <cmath>
#include <memory>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/philox.h"
#include "gtest/gtest.h"
#include "model/param_store.h"
#include "optim/grad_clip.h"
#include "optim/log_norms.h"
#include "support/tiny_model.h"
#include "test_grid.h"

namespace gpt {
namespace {

ProcessGrid& grid() {
  static std::unique_ptr<ProcessGrid> instance = build_test_grid(GridShape{2, 1, 2}, /*timeout_seconds=*/120.0);
  return *instance;
}

Context& ctx() {
  static Context context = Context::cpu(1);
  return context;
}

ModelConfig moe_model() {
  ModelConfig c = testing_support::llama_style(testing_support::tiny_model(2, 6, /*pad_tp=*/4), /*query_groups=*/4);
  c.moe.num_experts = 4;
  c.moe.topk = 2;
  c.moe.ffn_hidden_size = 12;
  c.moe.moe_layers = {true, false};
  c.moe.shared_expert_size = 8;
  return c;
}

// The gradient of global element g of a parameter: a quarter-integer, zero for one in seven.
float gradient(const std::string& name, int64_t g) {
  const int64_t k = static_cast<int64_t>(philox_key(1234, name) % 97) + g;
  return k % 7 == 0 ? 0.0f : static_cast<float>(k % 11 - 5) * 0.25f;
}

TEST(ExpertNorm, EveryElementOnceOverBothDomains) {
  const int rank = grid().world_rank();
  ASSERT_EQ(grid().world_size(), 4);
  const int ep = rank % 2, edp = rank / 2;
  const std::vector<ParamSpec> all = build_param_specs(moe_model());
  double squares = 0.0;
  int64_t zeros = 0;
  for (const ParamSpec& spec : all) {
    for (int64_t g = 0; g < spec.global_numel(); ++g) {
      const double v = gradient(spec.name, g);
      squares += v * v;
      zeros += v == 0.0 ? 1 : 0;
    }
  }
  std::vector<ParamSpec> mine;
  for (const ParamSpec& spec : all) {
    if (holds_param(spec, 4, {ep, 2})) mine.push_back(spec);
  }
  for (bool distributed : {false, true}) {
    SCOPED_TRACE(distributed ? "distributed optimizer" : "replicated");
    const ShardPlanConfig config{.tensor_parallel_rank = 0,
                                 .tensor_parallel_size = 1,
                                 .data_parallel_rank = rank,
                                 .data_parallel_size = 4,
                                 .distributed_optimizer = distributed,
                                 .expert_tensor_parallel_rank = 0,
                                 .expert_tensor_parallel_size = 1,
                                 .separate_experts = true,
                                 .expert_data_parallel_rank = edp,
                                 .expert_data_parallel_size = 2};
    Arena arena(Device::kCpu, "expert_norm");
    ParamStore store(ShardPlan(mine, config), DType::kFloat32, arena);
    ASSERT_TRUE(store.plan().experts_apart());
    for (const Param& param : store.params()) {
      const int64_t cols = param.local_shape.rank() == 2 ? param.local_shape[1] : 1;
      const int64_t global_cols = param.spec->global_shape.size() == 2 ? param.spec->global_shape[1] : 1;
      float* grad = param.grad.data_as<float>();
      for (int64_t i = 0; i < param.numel(); ++i) {
        const int64_t g = param.global_row(i / cols) * global_cols + param.column_offset + i % cols;
        grad[i] = gradient(param.name(), g);
      }
    }
    // The trainer's groups (train/trainer.cc's norm_groups) for this world: the model-parallel
    // group is one rank (the pipeline group of the test grid), the dense shards' group the world.
    NormGroups groups{.dense = {&grid().pipeline()}, .expert = {&grid().tensor()}};
    ASSERT_EQ(grid().pipeline().size(), 1);
    if (distributed) {
      groups.dense.push_back(&grid().world());
      groups.expert.push_back(&grid().data());
    }
    const Tensor scratch = arena.allocate(DType::kFloat32, {1});
    const Tensor count = arena.allocate(DType::kInt64, {1});
    const std::vector<Range> owned = store.plan().owned();
    EXPECT_NEAR(domain_grad_norm(ctx(), store, scratch, groups, owned), std::sqrt(squares), 1e-5 * std::sqrt(squares));
    EXPECT_EQ(domain_zero_gradients(ctx(), store, owned, count, groups), zeros);
    // Replicated, the experts summed over the dense groups alone would miss the other EP rank's.
    if (!distributed) {
      const double dense_only = global_grad_norm(ctx(), store, scratch, groups.dense, owned);
      EXPECT_GT(std::abs(dense_only - std::sqrt(squares)), 1e-3);
    }
  }
}

}  // namespace
}  // namespace gpt
