// --check-weight-hash-across-dp-replicas-interval N (Megatron's check_param_hashes_across_dp_replicas):
// every N iterations each rank hashes the parameters it holds (FNV-1a over the bytes of its flat
// parameter buffer, after the distributed optimizer's all-gather), and the ranks that hold the same
// slices (the same tensor- and pipeline-parallel coordinates, every data-parallel rank) must have
// equal hashes. Data-parallel replicas that drifted apart (a bit flip, a rank that skipped an
// update) stop the run, naming the ranks, instead of training on silently diverged copies.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/status.h"
#include "parallel/process_grid.h"
#include "train/training_state.h"

namespace gpt {

// Collective over the world (every rank calls it after the same `iteration`, with its parameters).
// OK where the interval is 0 or the iteration is not a multiple of it.
absl::Status check_replica_weights(const RankParameters& parameters, int64_t iteration, const ProcessGrid& grid,
                                   int64_t interval);

// The check behind it (and --test-mode's): every rank hashes `bytes` (FNV-1a; the fault-injection
// tag `corruption` flips a bit first, for the tests), the hashes are all-gathered over the world
// (`what` names the exchange), and each rank is compared with its reference rank, the coordinates
// `to_reference` makes of its own. Returns "rank (against reference)" for each rank that differs.
std::vector<std::string> ranks_differing_from_reference(const ProcessGrid& grid, std::vector<char> bytes,
                                                        const char* corruption, const char* what,
                                                        const std::function<void(GridCoordinates&)>& to_reference);

}  // namespace gpt
