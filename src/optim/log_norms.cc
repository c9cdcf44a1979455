#include "optim/log_norms.h"

#include <vector>

#include "core/stream_copy.h"
#include "kernels/ops.h"
#include "optim/grad_clip.h"

namespace gpt {

double global_params_norm(Context& ctx, const ParamStore& params, const AdamW& optimizer, const Tensor& scratch,
                          std::span<Communicator* const> groups) {
  // The master weights of each counted slice, wherever the optimizer keeps them (its FP32 copy,
  // the flat values themselves in FP32 training, or host memory when offloaded).
  ops::zero(ctx, scratch);
  for (const CountedSlice& slice : counted_slices(params, optimizer.owned())) {
    optimizer.add_master_squares(ctx, scratch, {slice.begin, slice.end});
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

double domain_params_norm(Context& ctx, const ParamStore& params, const AdamW& optimizer, const Tensor& scratch,
                          const NormGroups& groups) {
  if (!params.plan().experts_apart()) return global_params_norm(ctx, params, optimizer, scratch, groups.dense);
  return domain_norm(ctx, params, scratch, groups, optimizer.owned(),
                     [&](const Tensor& sum, const CountedSlice& slice) {
                       optimizer.add_master_squares(ctx, sum, {slice.begin, slice.end});
                     });
}

int64_t domain_zero_gradients(Context& ctx, const ParamStore& params, std::span<const Range> owned,
                              const Tensor& scratch, const NormGroups& groups) {
  if (!params.plan().experts_apart()) return count_zero_gradients(ctx, params, owned, scratch, groups.dense);
  int64_t zeros = 0;
  for (const NormPart part : {NormPart::kDense, NormPart::kExpert}) {
    ops::zero(ctx, scratch);
    for (const CountedSlice& slice : counted_slices(params, owned, part)) {
      ops::count_zeros(ctx, scratch, params.grads_in({slice.begin, slice.end}));
    }
    sum_over_groups(ctx, scratch, part == NormPart::kDense ? groups.dense : groups.expert);
    int64_t count = 0;
    copy_to_host(ctx, &count, scratch);
    ctx.synchronize();
    zeros += count;
  }
  return zeros;
}

}  // namespace gpt
