// Context parallelism's flags (--context-parallel-size, --cp-comm-type): what the load-balanced
// split and the attention cores need (model/context_parallel.h), each refusal naming the flags.
#pragma once

#include "core/status.h"
#include "train/arguments.h"

namespace gpt {

// validate_arguments' part.
absl::Status validate_context_parallel_arguments(const Arguments& args);

}  // namespace gpt
