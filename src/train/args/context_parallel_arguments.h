// Context parallelism's flags (--context-parallel-size, --cp-comm-type): what the load-balanced
// split and the attention cores need (model/context_parallel.h), each refusal naming the flags.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "train/args/arguments.h"

namespace gpt {

// --hierarchical-context-parallel-sizes as integers: the values are split at spaces and commas and
// stripped of brackets ("2 2", "[2 2]", "[2, 2]" -> [2, 2]); empty when not given.
absl::StatusOr<std::vector<int64_t>> hierarchical_context_parallel_sizes(const Arguments& args);
// The all-to-all level's size A of the context group's two levels when the sizes are given and CP > 1
// (the process grid then builds both levels), else 0. Call after validation.
int64_t context_inner_size(const Arguments& args);
// Whether some layer's --cp-comm-type is a2a+p2p (the workspace then holds the ring's blocks).
bool uses_all_to_all_ring(const Arguments& args);

// validate_arguments' part.
absl::Status validate_context_parallel_arguments(const Arguments& args);

}  // namespace gpt
