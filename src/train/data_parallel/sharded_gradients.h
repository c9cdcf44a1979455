// ZeRO-2 (Megatron-FSDP's optim_grads): each rank keeps only its shards of the gradients
// (parallel/data_parallel/grad_shards.h). A unit's backward takes working buffers for its buckets,
// and every microbatch's bucket is reduce-scattered into the shards once every group writing it
// has written it; the TP-replicated and tied-embedding sums then run on the shards
// (gradient_sums.h). The values stay whole: the distributed optimizer's updated shards are
// gathered after the step (updated_shard_gather.h), unless the plan shards them too, where
// ShardedParameters (ZeRO-3) builds on this class and gathers them per use.
#pragma once

#include <memory>
#include <span>

#include "core/arena.h"
#include "parallel/data_parallel/grad_shards.h"
#include "parallel/process_grid.h"
#include "parallel/tensor_parallel/regions.h"
#include "train/data_parallel/gradient_sums.h"
#include "train/data_parallel/group_table.h"
#include "train/data_parallel/strategy.h"
#include "train/data_parallel/updated_shard_gather.h"

namespace gpt {

class ShardedGradients final : public DataParallel {
 public:
  // The buckets and this rank's shards of them come from params.plan() (sharded gradients).
  ShardedGradients(const DataParallelConfig& config, ProcessGrid& grid, ParamStore& params, const TensorParallel& tp,
                   Arena& arena);

  void attach(std::span<GptModel* const> chunks) override;
  // attach without observing the chunks: for a strategy built on this one, which observes them
  // and passes the hooks on.
  void build_table(std::span<GptModel* const> chunks);
  // The group table (attach's).
  const GroupTable& table() const { return table_; }

  void start_iteration(Context& ctx) override;
  double finish_gradients(Context& ctx) override;
  void after_step(Context& ctx) override;
  void settle(Context& ctx) override;
  int64_t gradient_buffer_bytes() const override { return gradient_buffer_bytes_; }

  // A backward takes its buckets' working buffers; a forward waits for its buckets' parameter
  // gathers (--overlap-param-gather); every report reduces the buckets it completes.
  void before_use(Context& ctx, const ParamGroup& group, ParamUse use, int slot) override;
  void gradients_ready(Context& ctx, const ParamGroup& group, int slot, bool last_of_step) override;

 private:
  const ParamStore& params_;
  int64_t gradient_buffer_bytes_ = 0;  // before shards_, whose construction measures it
  std::unique_ptr<GradientShards> shards_;
  std::unique_ptr<UpdatedShardGather> gather_;  // null when the values are sharded (ZeRO-3)
  // The summed parameters' parts in this rank's shards, in flat order.
  TensorParallelSum tensor_parallel_;
  TiedEmbeddingSum tied_;
  GroupTable table_;
  BucketReports written_;  // this microbatch's writes, per bucket
};

}  // namespace gpt
