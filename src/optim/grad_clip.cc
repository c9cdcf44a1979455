#include "optim/grad_clip.h"

#include <cmath>

#include "core/arena.h"
#include "core/stream_copy.h"
#include "kernels/ops.h"

namespace gpt {

double global_grad_norm(Context& ctx, const ParamStore& params, const Tensor& scratch,
                        std::span<Communicator* const> groups) {
  ops::zero(ctx, scratch);
  for (const Param& param : params.params()) {
    if (param.counts_in_grad_norm) ops::sum_of_squares(ctx, scratch, param.grad.flat_range(0, param.numel()));
  }
  for (Communicator* group : groups) {
    if (group->size() > 1) group->all_reduce(ctx, scratch, ReduceOp::kSum);
  }
  float squares = 0.0f;
  copy_to_host(ctx, &squares, scratch);
  ctx.synchronize();  // the host needs the norm to decide the update: a wait for this stream only
  return std::sqrt(static_cast<double>(squares));
}

float clip_coefficient(double grad_norm, double max_norm) {
  if (max_norm <= 0.0) return 1.0f;
  const double coefficient = max_norm / (grad_norm + 1e-6);
  return coefficient < 1.0 ? static_cast<float>(coefficient) : 1.0f;
}

}  // namespace gpt
