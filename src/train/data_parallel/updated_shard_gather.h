// The distributed optimizer's parameter side for the strategies that keep whole values (ZeRO-1 and
// ZeRO-2): after the step each rank's updated shard of every bucket is all-gathered over its
// optimizer instance (parallel/data_parallel/param_gather.h), waited for at once, or with
// --overlap-param-gather bucket by bucket as the next forward first reads it.
#pragma once

#include <span>

#include "core/arena.h"
#include "core/context.h"
#include "model/param_store.h"
#include "parallel/comm/communicator.h"
#include "parallel/data_parallel/grad_sync.h"
#include "parallel/data_parallel/param_gather.h"

namespace gpt {

class UpdatedShardGather {
 public:
  // `instance`: the group the shards are laid out over (the optimizer instance). `overlap`: the
  // gathers stay in flight after the step until a forward reads their buckets.
  UpdatedShardGather(Communicator& instance, const ParamStore& params, bool overlap, Arena& arena);
  // Each bucket over its own group (the expert buckets over the expert data-parallel group).
  UpdatedShardGather(BucketGroups groups, const ParamStore& params, bool overlap, Arena& arena);

  // After the optimizer step: starts the gathers (nothing over one rank).
  void after_step(Context& ctx);
  // Before a forward of a group holding `buckets`: waits for their gathers if any is in flight.
  void before_forward(Context& ctx, std::span<const int> buckets);
  // Waits for every gather in flight.
  void settle(Context& ctx) { gather_.wait_all(ctx); }

 private:
  ParamGather gather_;
  bool overlap_;
};

}  // namespace gpt
