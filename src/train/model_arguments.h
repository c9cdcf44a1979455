// Validation of the model-family flags: dropout, rotary position embeddings, RMSNorm, SwiGLU,
// grouped-query attention and bias-free linears, with Megatron's names, defaults and rules. What
// Megatron would silently ignore (a rotary flag without rope, query groups without
// --group-query-attention) is refused here, so a launch script never trains another model than it
// says.
#pragma once

#include "core/status.h"
#include "train/arguments.h"

namespace gpt {

// For resolved arguments (resolve_defaults: --kv-channels, num_query_groups, and
// --no-position-embedding as --position-embedding-type none).
absl::Status validate_model_family(const Arguments& args);

// RoPE's rotated dimensions per head: Megatron's int(kv_channels * rotary_percent) (all of them at
// 1.0).
int64_t rotary_dimensions(const Arguments& args);

}  // namespace gpt
