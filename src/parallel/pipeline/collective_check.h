// The proof that a layout's collectives cannot hang (collective_program.h builds what each rank
// issues): the members of every group issue the same calls in the same order (the contract of
// communicator.h: "every rank of a group starts that group's operations in the same order"), and a
// simulation of the whole world in which each call waits for its group completes (no cycle of ranks
// waiting on each other across groups and pipeline transfers: Megatron-LM #5749, where the expert
// all-to-all and the data-parallel reduce-scatter, ordered differently on two ranks, each wait for
// the other).
#pragma once

#include "absl/status/status.h"
#include "parallel/pipeline/collective_program.h"

namespace gpt::pipeline {

enum class WaitModel {
  // As this program runs: a blocking call returns when every member of its group has issued it; a
  // bucket reduction is started (it waits for nobody) and waited for at the end of the iteration.
  kProgram,
  // Every call, bucket reductions included, waits for its group where it is issued (collectives
  // serialised on one stream, as a NCCL job whose reductions share the compute stream): the stricter
  // proof, which also holds where reductions are not asynchronous.
  kStrict,
};

// For every group, each member's calls on it equal its first member's. FailedPrecondition naming
// the group, its world ranks, the first call where two members differ and both orders around it:
//   collective order: group 'expert-tensor-and-model-parallel' (world ranks [0,1]) diverges at its
//   call 12: world rank 0 issues expert dispatch mb3 c0 L1 where world rank 1 issues expert combine
//   ...; world rank 0's order: ... | world rank 1's order: ...
absl::Status check_group_orders(const WorldProgram& program);

// Runs every rank's program with rendezvous collectives and pipeline transfers (matched per pair of
// ranks in posting order, as simulator.h does). FailedPrecondition "collective deadlock: ..." naming,
// for the stuck ranks, the call and group (with its world ranks) each waits on and where the members
// that have not issued it wait instead; InvalidArgument for mismatched pipeline transfers.
absl::Status check_no_wait_cycle(const WorldProgram& program, WaitModel model);

// collective_program, check_group_orders, check_no_wait_cycle under both wait models.
absl::Status check_collective_order(const GridLayout& grid, const Schedule& schedule, const ModelLayout& model);

}  // namespace gpt::pipeline
