// --check-weight-hash-across-dp-replicas-interval N (Megatron's check_param_hashes_across_dp_replicas):
// every N iterations each rank hashes the parameters it holds (FNV-1a over the bytes of its flat
// parameter buffer, after the distributed optimizer's all-gather), and the ranks that hold the same
// slices (the same tensor- and pipeline-parallel coordinates, every data-parallel rank) must have
// equal hashes. Data-parallel replicas that drifted apart (a bit flip, a rank that skipped an
// update) stop the run, naming the ranks, instead of training on silently diverged copies.
#pragma once

#include "core/status.h"
#include "parallel/process_grid.h"
#include "train/trainer.h"

namespace gpt {

// Collective over the world (every rank calls it after the same iteration). OK where the interval
// is 0 or the iteration is not a multiple of it.
absl::Status check_replica_weights(Trainer& trainer, const ProcessGrid& grid, int64_t interval);

}  // namespace gpt
