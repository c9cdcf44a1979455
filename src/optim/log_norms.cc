#include "optim/log_norms.h"

#include <vector>

#include "core/stream_copy.h"
#include "kernels/ops.h"
#include "optim/grad_clip.h"

namespace gpt {

double global_params_norm(Context& ctx, const ParamStore& params, const AdamW& optimizer, const Tensor& scratch,
                          std::span<Communicator* const> groups) {
  // A separate master copy (BF16 training) holds the owned ranges one after another: owned range r
  // starts at the sum of the sizes of the ranges before it. In FP32 training the master weights are
  // the flat values themselves, indexed as the store's buffers.
  const std::vector<Range>& owned = optimizer.owned();
  std::vector<int64_t> state_offset(owned.size(), 0);
  for (size_t r = 1; r < owned.size(); ++r) state_offset[r] = state_offset[r - 1] + owned[r - 1].size();
  ops::zero(ctx, scratch);
  for (const CountedSlice& slice : counted_slices(params, owned)) {
    const int64_t begin = optimizer.has_separate_master()
                              ? state_offset[slice.owned_index] + (slice.begin - owned[slice.owned_index].begin)
                              : slice.begin;
    ops::sum_of_squares(ctx, scratch, optimizer.master().flat_range(begin, slice.end - slice.begin));
  }
  return reduced_norm(ctx, scratch, groups);
}

int64_t count_zero_gradients(Context& ctx, const ParamStore& params, std::span<const Range> owned,
                             const Tensor& scratch, std::span<Communicator* const> groups) {
  ops::zero(ctx, scratch);
  // One slice per parameter: the alignment padding between parameters is not counted.
  for (const CountedSlice& slice : counted_slices(params, owned)) {
    ops::count_zeros(ctx, scratch, params.grads_in({slice.begin, slice.end}));
  }
  sum_over_groups(ctx, scratch, groups);
  int64_t zeros = 0;
  copy_to_host(ctx, &zeros, scratch);
  ctx.synchronize();
  return zeros;
}

}  // namespace gpt
