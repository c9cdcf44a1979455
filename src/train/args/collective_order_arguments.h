// validate_for_world's proof, for a MoE model, that the layout's collectives cannot hang: every
// rank's calls (parallel/pipeline/collective_program.h: the schedule's steps expanded into the
// expert exchanges of each MoE layer, the tensor / context calls, the gradient buckets over data x
// context and expert data, ZeRO-3's gathers, the tied embedding's sum) issued in the same order by
// every member of each group, and no wait cycle across groups and pipeline transfers
// (parallel/pipeline/collective_check.h; Megatron-LM #5749). A refusal is one line naming the group,
// its world ranks and the two orders.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "train/args/arguments.h"

namespace gpt {

// The proof runs up to this many calls over the world (world x microbatches x chunks x layers per
// chunk x about 12): under a second (0.35 s for world 256, 64 microbatches, 32 layers). Larger
// layouts are trusted to the unit test's proof of every schedule x expert layout up to world 16
// (tests/unit/parallel/pipeline_collective_order_test).
inline constexpr int64_t kCollectiveOrderBudget = 4'000'000;

// For validated arguments (the schedule's layout rules passed) with `microbatches` per iteration:
// OK for a dense model, or when the layout is over the budget.
absl::Status validate_collective_order(const Arguments& args, int64_t world_size, int microbatches);

}  // namespace gpt
