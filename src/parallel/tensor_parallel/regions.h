// Megatron's tensor-parallel region operators (Shoeybi et al. 2019, Korthikanti et al. 2022), as
// explicit forward/backward pairs. Without sequence parallelism activations outside the
// column/row-parallel pair are replicated [s, b, h] on every TP rank; with it they are split along
// the sequence, [s/tp, b, h], and the all-reduces become all-gather / reduce-scatter.
//
//   column-parallel input:   forward  gather_input          backward reduce_input_grad
//   row-parallel output:     forward  reduce_output          backward gather_output_grad
//
// Each returns the tensor holding the result: either its argument (an identity or an in-place
// all-reduce) or the buffer it was given.
#pragma once

#include "parallel/comm/communicator.h"

namespace gpt {

class TensorParallel {
 public:
  TensorParallel(Communicator& group, bool sequence_parallel)
      : group_(group), sequence_parallel_(sequence_parallel) {}

  int size() const { return group_.size(); }
  int rank() const { return group_.rank(); }
  bool sequence_parallel() const { return sequence_parallel_ && group_.size() > 1; }
  Communicator& group() const { return group_; }

  // Local sequence length of the residual stream.
  int64_t local_sequence(int64_t sequence) const { return sequence_parallel() ? sequence / size() : sequence; }
  // Position of this rank's first sequence row.
  int64_t sequence_offset(int64_t sequence) const { return sequence_parallel() ? rank() * (sequence / size()) : 0; }

  // Before a column-parallel GEMM. local [s_l, b, h] -> [s, b, h] (all-gather into `full` under
  // sequence parallelism; otherwise `local` itself).
  Tensor gather_input(Context& ctx, const Tensor& local, const Tensor& full) const;
  // The same all-gather left in flight (backward's re-gather of a column-parallel input for its
  // weight gradient, overlapped with the input gradient's GEMM); an empty handle without sequence
  // parallelism, where `local` is the full input.
  CollectiveHandle start_gather_input(Context& ctx, const Tensor& local, const Tensor& full) const;
  // Its backward. grad_full [s, b, h] -> [s_l, b, h]: reduce-scatter into `local` under sequence
  // parallelism; otherwise all-reduce of grad_full in place (returned).
  Tensor reduce_input_grad(Context& ctx, const Tensor& grad_full, const Tensor& local) const;
  // After a row-parallel GEMM. partial [s, b, h] -> [s_l, b, h]: reduce-scatter into `local` under
  // sequence parallelism; otherwise all-reduce of partial in place (returned).
  Tensor reduce_output(Context& ctx, const Tensor& partial, const Tensor& local) const;
  // Its backward. grad_local [s_l, b, h] -> [s, b, h]: all-gather into `full` under sequence
  // parallelism; otherwise grad_local itself.
  Tensor gather_output_grad(Context& ctx, const Tensor& grad_local, const Tensor& full) const;

 private:
  Communicator& group_;
  bool sequence_parallel_;
};

}  // namespace gpt
