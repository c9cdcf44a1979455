#include "optim/grad_clip.h"

#include <algorithm>
#include <cmath>
#include <vector>

#include "core/arena.h"
#include "core/stream_copy.h"
#include "kernels/ops.h"

namespace gpt {

namespace {

// The parameters in flat order.
std::vector<const Param*> in_flat_order(const ParamStore& params) {
  std::vector<const Param*> ordered;
  for (const Param& param : params.params()) ordered.push_back(&param);
  std::sort(ordered.begin(), ordered.end(), [](const Param* a, const Param* b) { return a->flat_offset < b->flat_offset; });
  return ordered;
}

std::vector<Range> or_everything(const ParamStore& params, std::span<const Range> owned) {
  if (!owned.empty()) return {owned.begin(), owned.end()};
  return {Range{0, params.plan().flat_elements()}};
}

}  // namespace

void sum_over_groups(Context& ctx, const Tensor& scratch, std::span<Communicator* const> groups) {
  for (Communicator* group : groups) {
    if (group->size() > 1) group->all_reduce(ctx, scratch, ReduceOp::kSum);
  }
}

double reduced_norm(Context& ctx, const Tensor& scratch, std::span<Communicator* const> groups) {
  sum_over_groups(ctx, scratch, groups);
  float squares = 0.0f;
  copy_to_host(ctx, &squares, scratch);
  ctx.synchronize();  // the host needs the norm (to decide the update): a wait for this stream only
  return std::sqrt(static_cast<double>(squares));
}

std::vector<CountedSlice> counted_slices(const ParamStore& params, std::span<const Range> owned, NormPart part) {
  std::vector<CountedSlice> slices;
  const std::vector<Range> ranges = or_everything(params, owned);
  const std::vector<const Param*> ordered = in_flat_order(params);
  const auto in_part = [part](const Param& param) {
    if (part == NormPart::kAll) return true;
    return (param.placement->domain == ParamDomain::kExpert) == (part == NormPart::kExpert);
  };
  for (size_t r = 0; r < ranges.size(); ++r) {
    for (size_t p = 0; p < ordered.size(); ++p) {
      if (!ordered[p]->counts_in_grad_norm || !in_part(*ordered[p])) continue;
      const Range mine = params.range_of(*ordered[p]).intersect(ranges[r]);
      if (!mine.empty()) slices.push_back({mine.begin, mine.end, r, p});
    }
  }
  return slices;
}

namespace {

// Adds the squares of the gradients of `part`'s counted slices inside `owned` into `scratch`.
// Counted slices of parameters that follow each other in one owned range are summed as one range
// (the alignment padding between parameters holds zero gradients): one launch per owned range
// when every parameter counts, instead of one per parameter.
void add_grad_squares(Context& ctx, const ParamStore& params, const Tensor& scratch, std::span<const Range> owned,
                      NormPart part) {
  const std::vector<CountedSlice> slices = counted_slices(params, owned, part);
  for (size_t i = 0; i < slices.size();) {
    size_t j = i + 1;
    while (j < slices.size() && slices[j].owned_index == slices[i].owned_index &&
           slices[j].param_index == slices[j - 1].param_index + 1) {
      ++j;
    }
    ops::sum_of_squares(ctx, scratch, params.grads_in({slices[i].begin, slices[j - 1].end}));
    i = j;
  }
}

// The float32 sum in `scratch` [1] once summed over `groups` (waits for the context's stream).
double reduced_sum(Context& ctx, const Tensor& scratch, std::span<Communicator* const> groups) {
  sum_over_groups(ctx, scratch, groups);
  float sum = 0.0f;
  copy_to_host(ctx, &sum, scratch);
  ctx.synchronize();
  return static_cast<double>(sum);
}

}  // namespace

double global_grad_norm(Context& ctx, const ParamStore& params, const Tensor& scratch,
                        std::span<Communicator* const> groups, std::span<const Range> owned) {
  ops::zero(ctx, scratch);
  add_grad_squares(ctx, params, scratch, owned, NormPart::kAll);
  return reduced_norm(ctx, scratch, groups);
}

double domain_grad_norm(Context& ctx, const ParamStore& params, const Tensor& scratch, const NormGroups& groups,
                        std::span<const Range> owned) {
  if (!params.plan().experts_apart()) return global_grad_norm(ctx, params, scratch, groups.dense, owned);
  double squares = 0.0;
  for (const NormPart part : {NormPart::kDense, NormPart::kExpert}) {
    ops::zero(ctx, scratch);
    add_grad_squares(ctx, params, scratch, owned, part);
    squares += reduced_sum(ctx, scratch, part == NormPart::kDense ? groups.dense : groups.expert);
  }
  return std::sqrt(squares);
}

double domain_norm(Context& ctx, const ParamStore& params, const Tensor& scratch, const NormGroups& groups,
                   std::span<const Range> owned,
                   const std::function<void(const Tensor& scratch, const CountedSlice& slice)>& add_squares) {
  const bool apart = params.plan().experts_apart();
  double squares = 0.0;
  for (const NormPart part : {NormPart::kDense, NormPart::kExpert}) {
    if (!apart && part == NormPart::kExpert) break;
    ops::zero(ctx, scratch);
    for (const CountedSlice& slice : counted_slices(params, owned, apart ? part : NormPart::kAll)) {
      add_squares(scratch, slice);
    }
    squares += reduced_sum(ctx, scratch, part == NormPart::kDense ? groups.dense : groups.expert);
  }
  return std::sqrt(squares);
}

const Param* first_non_finite_gradient(Context& ctx, const ParamStore& params, const Tensor& scratch,
                                       std::span<const Range> owned) {
  for (const Param* param : in_flat_order(params)) {
    for (const Range& range : or_everything(params, owned)) {
      const Range mine = params.range_of(*param).intersect(range);
      if (mine.empty()) continue;
      ops::zero(ctx, scratch);
      ops::sum_of_squares(ctx, scratch, params.grads_in(mine));
      float squares = 0.0f;
      copy_to_host(ctx, &squares, scratch);
      ctx.synchronize();
      if (!std::isfinite(squares)) return param;
    }
  }
  return nullptr;
}

float clip_coefficient(double grad_norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0f;
  const double coefficient = max_norm / (grad_norm + 1e-6);
  return coefficient < 1.0 ? static_cast<float>(coefficient) : 1.0f;
}

}  // namespace gpt
