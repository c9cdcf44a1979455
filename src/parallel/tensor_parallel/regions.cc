#include "parallel/tensor_parallel/regions.h"

#include "core/phase_timer.h"

namespace gpt {

Tensor TensorParallel::gather_input(Context& ctx, const Tensor& local, const Tensor& full) const {
  if (!sequence_parallel()) return local;
  const phase_timer::Scope timed(ctx, phase_timer::Phase::kTensorParallelComm);
  group_.all_gather(ctx, full, local);
  return full;
}

CollectiveHandle TensorParallel::start_gather_input(Context& ctx, const Tensor& local, const Tensor& full) const {
  if (!sequence_parallel()) return CollectiveHandle();
  return group_.start_all_gather(ctx, full, local);
}

Tensor TensorParallel::reduce_input_grad(Context& ctx, const Tensor& grad_full, const Tensor& local) const {
  if (group_.size() == 1) return grad_full;
  const phase_timer::Scope timed(ctx, phase_timer::Phase::kTensorParallelComm);
  if (sequence_parallel()) {
    group_.reduce_scatter(ctx, local, grad_full, ReduceOp::kSum);
    return local;
  }
  group_.all_reduce(ctx, grad_full, ReduceOp::kSum);
  return grad_full;
}

Tensor TensorParallel::reduce_output(Context& ctx, const Tensor& partial, const Tensor& local) const {
  return reduce_input_grad(ctx, partial, local);  // the same collective: sum over TP ranks
}

Tensor TensorParallel::gather_output_grad(Context& ctx, const Tensor& grad_local, const Tensor& full) const {
  return gather_input(ctx, grad_local, full);  // the same collective: gather along the sequence
}

}  // namespace gpt
