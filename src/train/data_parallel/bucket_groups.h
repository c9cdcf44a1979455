// Which group each bucket of the shard plan is reduced and sharded over (EP-DESIGN.md): the dense
// buckets over the data x context group (the distributed optimizer's instance), the expert buckets
// (ShardPlan's expert domain) over the expert grid's data-parallel group, Megatron's expert-data-
// parallel group that expert parameters' gradients are summed over and their optimizer state
// spread over.
#pragma once

#include "model/shard_plan.h"
#include "parallel/comm/communicator.h"
#include "parallel/data_parallel/grad_sync.h"
#include "parallel/process_grid.h"

namespace gpt {

// [bucket] `dense` or `expert` by the bucket's domain. Fatal unless `expert` is the group the plan
// laid the expert buckets out for (its size and this rank's place in it).
BucketGroups bucket_groups(const ShardPlan& plan, Communicator& dense, Communicator& expert);
// The same from the grid: `dense` as given, the expert buckets over grid.expert_data().
BucketGroups bucket_groups(const ShardPlan& plan, Communicator& dense, const ProcessGrid& grid);

}  // namespace gpt
