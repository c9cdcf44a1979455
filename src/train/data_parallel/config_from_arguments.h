// The data-parallel components' configs from the validated flags: the shard plan's
// (model/shard_plan.h) and the strategies' (data_parallel/config.h).
#pragma once

#include "model/shard_plan.h"
#include "parallel/process_grid.h"
#include "train/arguments.h"
#include "train/data_parallel/config.h"

namespace gpt {

// The data-parallel configuration of this rank's shard plan (model/shard_plan.h) from the flags:
// Megatron's buckets (--ddp-bucket-size, default max(4e7, 1e6 x DP) elements, with
// --overlap-grad-reduce only and on the first pipeline stage only; otherwise one bucket), the
// distributed optimizer's sharding, the tied word embedding alone when it spans pipeline stages.
ShardPlanConfig shard_plan_config_from(const Arguments& args, const GridShape& shape,
                                       const GridCoordinates& coordinates);

// What DataParallel does besides the shard plan's layout.
DataParallelConfig data_parallel_config_from(const Arguments& args);

}  // namespace gpt
