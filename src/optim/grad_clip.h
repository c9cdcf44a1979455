// Gradient clipping by the global L2 norm (Megatron's clip_grad_norm_fp32): every parameter counts
// once however the model is split. The norm is computed from the gradients this rank holds in full
// (its owned ranges: everything, or its shard of every bucket with the distributed optimizer) and
// then summed over the groups that hold different parameters or shards (passed in by the caller).
#pragma once

#include <span>

#include "core/context.h"
#include "model/param_store.h"
#include "parallel/comm/communicator.h"
#include "parallel/data_parallel/range.h"

namespace gpt {

// Square root of the sum of squares of the gradients this rank counts (TP duplicates and the last
// stage's copy of the tied embedding excluded) inside `owned` (empty: the whole buffer), summed over
// `groups` (e.g. the model-parallel and, with sharded gradients, the data-parallel group), using
// the float32 scalar `scratch` [1].
double global_grad_norm(Context& ctx, const ParamStore& params, const Tensor& scratch,
                        std::span<Communicator* const> groups, std::span<const Range> owned = {});

// The first parameter (in flat order) with a non-finite gradient inside `owned`, or nullptr.
// For messages after a non-finite norm: one reduction per parameter.
const Param* first_non_finite_gradient(Context& ctx, const ParamStore& params, const Tensor& scratch,
                                       std::span<const Range> owned = {});

// Megatron's rule: scale = max_norm / (norm + 1e-6) when that is below 1, else 1 (no clipping
// when max_norm <= 0).
float clip_coefficient(double grad_norm, double max_norm);

}  // namespace gpt
