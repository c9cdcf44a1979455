// Gradient clipping by the global L2 norm (Megatron's clip_grad_norm_fp32): every parameter counts
// once however the model is split. The norm is computed from this rank's gradients and then summed
// over the groups that hold different parameters (passed in by the caller).
#pragma once

#include <span>

#include "core/context.h"
#include "model/param_store.h"
#include "parallel/comm/communicator.h"

namespace gpt {

// Sum of squares of the gradients this rank counts (TP duplicates excluded), summed over
// `groups` (e.g. the model-parallel group), into the float32 scalar `scratch` [1].
double global_grad_norm(Context& ctx, const ParamStore& params, const Tensor& scratch,
                        std::span<Communicator* const> groups);

// Megatron's rule: scale = max_norm / (norm + 1e-6) when that is below 1, else 1 (no clipping
// when max_norm <= 0).
float clip_coefficient(double grad_norm, double max_norm);

}  // namespace gpt
