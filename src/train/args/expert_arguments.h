// --expert-tensor-parallel-size: Megatron sizes its expert (MoE) layers' tensor-parallel groups
// with it. This program's models have no expert layers (the MoE flags are refused), so, as in
// Megatron for a dense model, no parameter uses those groups; Megatron's parallel_state still checks
// the expert grid (tensor x expert (1 here) x pipeline, the rest expert data-parallel) against the
// world, and so does this program, with the same rules.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "train/args/arguments.h"

namespace gpt {

// validate_for_world's part, with the dense data-parallel size `dp` (resolve_defaults adds the
// start-up note when the expert size differs from the dense tensor-parallel size).
absl::Status check_expert_groups(const Arguments& args, int64_t world_size, int64_t dp);

}  // namespace gpt
