#include "train/data_parallel/updated_shard_gather.h"

namespace gpt {

UpdatedShardGather::UpdatedShardGather(Communicator& instance, const ParamStore& params, bool overlap, Arena& arena)
    : UpdatedShardGather(same_group(instance, params.plan().buckets().size()), params, overlap, arena) {}

UpdatedShardGather::UpdatedShardGather(BucketGroups groups, const ParamStore& params, bool overlap, Arena& arena)
    : gather_(std::move(groups), params.flat_values(), params.plan().bucket_shards(), arena), overlap_(overlap) {}

void UpdatedShardGather::after_step(Context& ctx) {
  if (!gather_.gathers()) return;
  gather_.start(ctx);
  if (!overlap_) gather_.wait_all(ctx);
}

void UpdatedShardGather::before_forward(Context& ctx, std::span<const int> buckets) {
  if (!gather_.in_flight()) return;
  for (int bucket : buckets) gather_.wait_for(ctx, bucket);
}

}  // namespace gpt
