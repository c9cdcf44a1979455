// ZeRO-0/1: every rank holds the full gradients (Megatron's DistributedDataParallel). Under
// sequence parallelism the replicated parameters' gradients are summed over TP (one coalesced
// all-reduce per group or at the end, not one per parameter); the tied word embedding's two copies
// (first and last pipeline stage) are summed over the embedding group; then every bucket is
// all-reduced over DP, or reduce-scattered with --use-distributed-optimizer (whose updated shards
// are gathered after the step: updated_shard_gather.h). With --overlap-grad-reduce a bucket's
// reduction starts as soon as every group writing it has reported its gradients final in the
// iteration's last backward, while the rest of backward runs.
#pragma once

#include <memory>
#include <span>
#include <vector>

#include "core/arena.h"
#include "parallel/data_parallel/grad_sync.h"
#include "parallel/process_grid.h"
#include "parallel/tensor_parallel/regions.h"
#include "train/data_parallel/gradient_sums.h"
#include "train/data_parallel/group_table.h"
#include "train/data_parallel/strategy.h"
#include "train/data_parallel/updated_shard_gather.h"

namespace gpt {

class ReplicatedGradients final : public DataParallel {
 public:
  // The distributed optimizer's sharding and the buckets come from params.plan().
  ReplicatedGradients(const DataParallelConfig& config, ProcessGrid& grid, ParamStore& params,
                      const TensorParallel& tp, Arena& arena);

  void attach(std::span<GptModel* const> chunks) override;
  void start_iteration(Context& ctx) override;
  double finish_gradients(Context& ctx) override;
  void after_step(Context& ctx) override;
  void settle(Context& ctx) override;

  // A forward waits for its buckets' parameter gathers (--overlap-param-gather); a group's last
  // report of the step sums its TP-replicated gradients and starts the buckets it completes
  // (--overlap-grad-reduce).
  void before_use(Context& ctx, const ParamGroup& group, ParamUse use, int slot) override;
  void gradients_ready(Context& ctx, const ParamGroup& group, int slot, bool last_of_step) override;

 private:
  const ParamStore& params_;
  const TensorParallel& tp_;
  bool overlap_grad_reduce_, overlap_param_gather_;
  std::unique_ptr<GradientSync> grads_;
  std::unique_ptr<UpdatedShardGather> gather_;  // with the distributed optimizer
  // A piece per parameter summed over TP, in flat order.
  TensorParallelSum tensor_parallel_;
  TiedEmbeddingSum tied_;
  int tied_bucket_ = -1;  // its reduction waits for the tied embedding's sum (finish_gradients)
  GroupTable table_;
  std::vector<std::vector<int>> group_pieces_;  // [row] tensor_parallel_'s pieces of the group, in its order
  BucketReports ready_;                         // this iteration's last reports, per bucket
};

}  // namespace gpt
