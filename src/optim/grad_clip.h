// Gradient clipping by the global L2 norm (Megatron's clip_grad_norm_fp32): every parameter counts
// once however the model is split. The norm is computed from the gradients this rank holds in full
// (its owned ranges: everything, or its shard of every bucket with the distributed optimizer) and
// then summed over the groups that hold different parameters or shards (passed in by the caller).
#pragma once

#include <functional>
#include <span>
#include <vector>

#include "core/context.h"
#include "model/param_store.h"
#include "parallel/comm/communicator.h"
#include "parallel/data_parallel/range.h"

namespace gpt {

// Which parameters a norm counts: every one, or one domain of a plan that keeps the routed
// experts apart (model/shard_plan.h), whose sums are reduced over different groups.
enum class NormPart { kAll, kDense, kExpert };

// The groups a norm's sums are reduced over, by domain: the dense parameters' (the model-parallel
// group, and the optimizer instance with the distributed optimizer) and, when the plan keeps the
// experts apart, the expert parameters' (Megatron's 'tp-ep-pp' group, and the expert data-parallel
// group with the distributed optimizer). Each domain's sum is reduced over its own groups and the
// two are added (Megatron's get_grad_norm_fp32 over dense and expert parameters): every element once.
struct NormGroups {
  std::vector<Communicator*> dense;
  std::vector<Communicator*> expert;
};

// Sums `scratch` in place over each of `groups` that has more than one rank.
void sum_over_groups(Context& ctx, const Tensor& scratch, std::span<Communicator* const> groups);
// The square root of the float32 sum of squares in `scratch` [1] once summed over `groups` (waits
// for the context's stream).
double reduced_norm(Context& ctx, const Tensor& scratch, std::span<Communicator* const> groups);

// A counted parameter's part inside one owned range: flat elements [begin, end) of the store's
// buffers, inside owned range `owned_index` (of `owned`, or of the whole buffer when it is empty).
struct CountedSlice {
  int64_t begin = 0, end = 0;
  size_t owned_index = 0;
  size_t param_index = 0;  // the parameter's position in flat order (all parameters counted)
};
// The parts of the parameters that count in norms (TP duplicates and the last stage's copy of the
// tied embedding excluded) inside `owned`, in flat order; empty `owned` means the whole buffer.
std::vector<CountedSlice> counted_slices(const ParamStore& params, std::span<const Range> owned = {},
                                        NormPart part = NormPart::kAll);

// Square root of the sum of squares of the gradients this rank counts (TP duplicates and the last
// stage's copy of the tied embedding excluded) inside `owned` (empty: the whole buffer), summed over
// `groups` (e.g. the model-parallel and, with sharded gradients, the data-parallel group), using
// the float32 scalar `scratch` [1].
double global_grad_norm(Context& ctx, const ParamStore& params, const Tensor& scratch,
                        std::span<Communicator* const> groups, std::span<const Range> owned = {});
// The same with each domain's sum reduced over its own groups (the dense ones only when the plan
// keeps no experts apart).
double domain_grad_norm(Context& ctx, const ParamStore& params, const Tensor& scratch, const NormGroups& groups,
                        std::span<const Range> owned = {});
// Square root of (the dense part's sum of squares reduced over groups.dense + the expert part's
// reduced over groups.expert), each part's squares added by `add_squares(scratch, slice)`: how every
// norm here is taken once the plan keeps experts apart.
double domain_norm(Context& ctx, const ParamStore& params, const Tensor& scratch, const NormGroups& groups,
                   std::span<const Range> owned,
                   const std::function<void(const Tensor& scratch, const CountedSlice& slice)>& add_squares);

// The first parameter (in flat order) with a non-finite gradient inside `owned`, or nullptr.
// For messages after a non-finite norm: one reduction per parameter.
const Param* first_non_finite_gradient(Context& ctx, const ParamStore& params, const Tensor& scratch,
                                       std::span<const Range> owned = {});

// Megatron's rule: scale = max_norm / (norm + 1e-6) when that is below 1, else 1 (no clipping
// when max_norm <= 0).
float clip_coefficient(double grad_norm, double max_norm);

}  // namespace gpt
