// --expert-tensor-parallel-size and --expert-model-parallel-size: Megatron's expert grid (expert
// tensor x expert model x pipeline, the rest expert data-parallel; parallel/process_grid.h) checked
// against the world with Megatron's rules. A dense model uses no expert group, but the grid is
// checked all the same, as Megatron's parallel_state does.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "train/args/arguments.h"

namespace gpt {

// validate_for_world's part, with the dense data-parallel size `dp` (resolve_defaults adds the
// start-up note when the expert size differs from the dense tensor-parallel size).
absl::Status check_expert_groups(const Arguments& args, int64_t world_size, int64_t dp);

}  // namespace gpt
