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
  return {Range{0, params.flat_grads().numel()}};
}

}  // namespace

double global_grad_norm(Context& ctx, const ParamStore& params, const Tensor& scratch,
                        std::span<Communicator* const> groups, std::span<const Range> owned) {
  ops::zero(ctx, scratch);
  // Within an owned range, parameters that count and are adjacent in the flat buffer are summed as
  // one range (the alignment padding between them holds zeros): one launch per owned range when
  // every parameter counts, instead of one per parameter.
  const std::vector<const Param*> ordered = in_flat_order(params);
  for (const Range& range : or_everything(params, owned)) {
    int64_t begin = -1, end = -1;
    auto flush = [&] {
      if (begin >= 0) ops::sum_of_squares(ctx, scratch, params.flat_grads().flat_range(begin, end - begin));
      begin = end = -1;
    };
    for (const Param* param : ordered) {
      const Range mine = params.range_of(*param).intersect(range);
      if (mine.empty()) continue;
      if (!param->counts_in_grad_norm) {
        flush();
        continue;
      }
      if (begin < 0) begin = mine.begin;
      end = mine.end;
    }
    flush();
  }
  for (Communicator* group : groups) {
    if (group->size() > 1) group->all_reduce(ctx, scratch, ReduceOp::kSum);
  }
  float squares = 0.0f;
  copy_to_host(ctx, &squares, scratch);
  ctx.synchronize();  // the host needs the norm to decide the update: a wait for this stream only
  return std::sqrt(static_cast<double>(squares));
}

const Param* first_non_finite_gradient(Context& ctx, const ParamStore& params, const Tensor& scratch,
                                       std::span<const Range> owned) {
  for (const Param* param : in_flat_order(params)) {
    for (const Range& range : or_everything(params, owned)) {
      const Range mine = params.range_of(*param).intersect(range);
      if (mine.empty()) continue;
      ops::zero(ctx, scratch);
      ops::sum_of_squares(ctx, scratch, params.flat_grads().flat_range(mine.begin, mine.size()));
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
