// The data-parallel strategy of this rank's shard plan (data_parallel/strategy.h): sharded
// parameters (ZeRO-3), sharded gradients (ZeRO-2), else replicated gradients (ZeRO-0/1).
#pragma once

#include <memory>

#include "core/arena.h"
#include "model/param_store.h"
#include "parallel/process_grid.h"
#include "parallel/tensor_parallel/regions.h"
#include "train/data_parallel/config.h"
#include "train/data_parallel/strategy.h"

namespace gpt {

// Fatal unless params.plan() was made for this rank's place in the group its shards are laid out
// over (the optimizer instance with the distributed optimizer, else the data x context group).
std::unique_ptr<DataParallel> make_data_parallel(const DataParallelConfig& config, ProcessGrid& grid,
                                                 ParamStore& params, const TensorParallel& tp, Arena& arena);

}  // namespace gpt
