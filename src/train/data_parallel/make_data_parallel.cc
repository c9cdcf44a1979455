#include "train/data_parallel/make_data_parallel.h"

#include "core/check.h"
#include "train/data_parallel/replicated_gradients.h"
#include "train/data_parallel/sharded_gradients.h"
#include "train/data_parallel/sharded_parameters.h"

namespace gpt {

std::unique_ptr<DataParallel> make_data_parallel(const DataParallelConfig& config, ProcessGrid& grid,
                                                 ParamStore& params, const TensorParallel& tp, Arena& arena) {
  const ShardPlan& plan = params.plan();
  // The distributed optimizer shards over this rank's instance (the whole data x context group
  // with one instance, and always without the distributed optimizer).
  const Communicator& shard_group =
      plan.config().distributed_optimizer ? grid.optimizer_instance() : grid.data_context();
  GPT_CHECK_EQ(plan.config().data_parallel_size, shard_group.size()) << "shard plan for another data-parallel size";
  GPT_CHECK_EQ(plan.config().data_parallel_rank, shard_group.rank()) << "shard plan of another data-parallel rank";
  GPT_CHECK(grid.across_optimizer_instances().size() == 1 || !(plan.sharded_gradients() || plan.sharded_parameters()))
      << "distributed-optimizer instances with ZeRO-2/3 (hybrid sharding) are refused by the arguments";
  GPT_CHECK(grid.across_optimizer_instances().size() == 1 || !plan.experts_apart())
      << "distributed-optimizer instances with expert parallelism are refused by the arguments";
  if (plan.sharded_parameters()) return std::make_unique<ShardedParameters>(config, grid, params, tp, arena);
  if (plan.sharded_gradients()) return std::make_unique<ShardedGradients>(config, grid, params, tp, arena);
  return std::make_unique<ReplicatedGradients>(config, grid, params, tp, arena);
}

}  // namespace gpt
