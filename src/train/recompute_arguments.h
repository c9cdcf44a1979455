// Activation recompute's flags (--recompute-activations, --recompute-granularity, --recompute-method,
// --recompute-num-layers) with Megatron's rules; a method or count without full recompute is refused
// where Megatron would silently ignore it.
#pragma once

#include "core/status.h"
#include "train/arguments.h"

namespace gpt {

// validate_arguments' part (the count's upper bound needs the pipeline layout: validate_for_world).
absl::Status validate_recompute_arguments(const Arguments& args);

}  // namespace gpt
