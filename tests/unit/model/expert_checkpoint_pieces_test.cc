// Checkpoint pieces under expert parallelism (checkpoint/sharded_tensor.h, EP-DESIGN.md): over every
// rank of a world TP x DP = ETP x EP x EDP, the pieces each rank would write — replica 0, and of
// the pieces replicated over data parallelism only those of data-parallel rank 0 (expert pieces:
// expert data-parallel rank 0, train/checkpointing.cc's writes_piece without the fully parallel
// spread) — cover every element of every global tensor exactly once, for the parameters and for the
// optimizer's state with and without the distributed optimizer, each expert under its global name
// with its ETP slice as the rectangle.
#include <map>
#include <string>
#include <vector>

#include "core/arena.h"
#include "gtest/gtest.h"
#include "model/param_store.h"
#include "optim/adamw.h"
#include "support/tiny_model.h"

namespace gpt {
namespace {

ModelConfig moe_model() {
  ModelConfig c = testing_support::llama_style(testing_support::tiny_model(2, 6, /*pad_tp=*/4), /*query_groups=*/4);
  c.moe.num_experts = 4;
  c.moe.topk = 2;
  c.moe.ffn_hidden_size = 12;
  c.moe.moe_layers = {false, true};
  c.moe.shared_expert_size = 8;
  return c;
}

struct Layout {
  int tp, dp, ep, etp;
  int world() const { return tp * dp; }
  int edp() const { return world() / (etp * ep); }
};

TEST(ExpertCheckpointPieces, EveryElementWrittenOnce) {
  Context ctx = Context::cpu(1);
  const std::vector<ParamSpec> all = build_param_specs(moe_model());
  for (const Layout l : {Layout{2, 2, 2, 1}, Layout{1, 4, 2, 1}, Layout{2, 4, 2, 2}, Layout{1, 4, 4, 1}}) {
    for (bool distributed : {false, true}) {
      SCOPED_TRACE("tp" + std::to_string(l.tp) + " dp" + std::to_string(l.dp) + " ep" + std::to_string(l.ep) + " etp" +
                   std::to_string(l.etp) + (distributed ? " distributed" : ""));
      // [key][global element] -> writers.
      std::map<std::string, std::vector<int>> written;
      for (const ParamSpec& spec : all) {
        for (const char* prefix : {"model/", "optimizer/master/", "optimizer/exp_avg/", "optimizer/exp_avg_sq/"}) {
          written[prefix + spec.name].assign(static_cast<size_t>(spec.global_numel()), 0);
        }
      }
      for (int rank = 0; rank < l.world(); ++rank) {
        const int ep = (rank / l.etp) % l.ep, edp = rank / (l.etp * l.ep), dp = rank / l.tp;
        std::vector<ParamSpec> mine;
        for (const ParamSpec& spec : all) {
          if (holds_param(spec, 4, {ep, l.ep})) mine.push_back(spec);
        }
        const ShardPlanConfig config{.tensor_parallel_rank = rank % l.tp,
                                     .tensor_parallel_size = l.tp,
                                     .data_parallel_rank = dp,
                                     .data_parallel_size = l.dp,
                                     .distributed_optimizer = distributed,
                                     .expert_tensor_parallel_rank = rank % l.etp,
                                     .expert_tensor_parallel_size = l.etp,
                                     .separate_experts = true,
                                     .expert_data_parallel_rank = edp,
                                     .expert_data_parallel_size = l.edp()};
        Arena arena(Device::kCpu, "pieces");
        ParamStore store(ShardPlan(mine, config), DType::kBFloat16, arena);
        AdamW adam(ctx, store, {}, arena, store.plan().owned());
        std::vector<ShardedTensor> pieces = store.sharded_tensors();
        for (ShardedTensor& piece : adam.sharded_tensors(distributed)) pieces.push_back(std::move(piece));
        for (const ShardedTensor& piece : pieces) {
          const std::string name = piece.key.substr(piece.key.find_last_of('/') + 1);
          const bool expert = name.find(".mlp.experts.") != std::string::npos;
          EXPECT_EQ(piece.expert_data_parallel, expert) << piece.key;
          if (piece.replica_id != 0) continue;
          if (piece.replicated_over_data_parallel && (expert ? edp : dp) != 0) continue;
          const int64_t cols = piece.global_shape.size() == 2 ? piece.global_shape[1] : 1;
          const int64_t piece_cols = piece.local_shape.size() == 2 ? piece.local_shape[1] : 1;
          for (int64_t k = 0; k < piece.numel(); ++k) {
            const int64_t row = piece.offsets[0] + k / piece_cols;
            const int64_t col = (piece.offsets.size() == 2 ? piece.offsets[1] : 0) + k % piece_cols;
            ++written.at(piece.key)[static_cast<size_t>(row * cols + col)];
          }
        }
      }
      for (const auto& [key, counts] : written) {
        for (size_t i = 0; i < counts.size(); ++i) ASSERT_EQ(counts[i], 1) << key << " element " << i;
      }
    }
  }
}

}  // namespace
}  // namespace gpt
