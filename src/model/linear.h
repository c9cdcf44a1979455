// A linear layer of a tensor-parallel pair (Megatron-Core's ColumnParallelLinear and
// RowParallelLinear) with its three passes: forward, the input gradient (backward_input) and the
// weight gradient (backward_weight). It owns its GEMMs, its tensor-parallel region ops and the
// record of what its weight gradient reads; it does not own activations (the layer's stash does).
//
//   column-parallel  forward:  x [s_l, b, in] -gather(SP)-> x_full [s b, in] -> y [s b, out_l] = x_full W^T + b
//                    input:    dx_full [s b, in] = dy W  -reduce(-scatter)-> dx [s_l, b, in]
//                    weight:   dW [out_l, in] += dy^T x_full;  db [out_l] += colsum(dy)
//   row-parallel     forward:  x [s b, in_l] -> partial [s b, out] = x W^T -reduce(-scatter)-> y [s_l, b, out]
//                              (the bias is the caller's: Megatron's bias-dropout-add fuses it later)
//                    input:    dy [s_l, b, out] -gather(SP)-> dy_full [s b, out];  dx [s b, in_l] = dy_full W
//                    weight:   dW [out, in_l] += dy_full^T x;  db [out] += colsum(dy)
//
// backward_input records what the weight gradient needs (x_full or x, dy_full, dy). With
// WeightGradTiming::kWithInputGrad the weight gradient runs at once, inside backward_input, on
// those tensors where they are (bitwise today's fused backward). With kDeferred it runs when
// backward_weight is called; the tensors are copied into a lease first (model/lease.h), since
// the scratch they live in is reused by the next layer's input-gradient pass. The copies are
// exact, so both orders give bitwise the same gradients.
//
// With FP8 (model/fp8_scaling.h) each GEMM casts its operands to FP8 with per-tensor scales; the
// weight gradient's record keeps the scales its operands were cast with.
#pragma once

#include <deque>
#include <string>

#include "kernels/ops.h"
#include "model/fp8_scaling.h"
#include "model/lease.h"
#include "model/param_store.h"
#include "parallel/tensor_parallel/regions.h"

namespace gpt {

enum class LinearKind { kColumnParallel, kRowParallel };

enum class WeightGradTiming {
  kWithInputGrad,  // computed inside backward_input (the fused backward)
  kDeferred,       // computed by a later backward_weight (zero-bubble schedules, the split test)
};

// Where a Linear's FP8 scales live: (layer, linear) of an Fp8Scaling, or no FP8.
struct LinearFp8Slot {
  Fp8Scaling* scaling = nullptr;
  int64_t layer = 0;
  int linear = 0;  // 0..3: qkv, proj, fc1, fc2
  // The context-parallel group (null: CP = 1): activations hold S / CP of the sequence, so the amax
  // of an input or output gradient is reduced over it too.
  Communicator* context = nullptr;
};

class Linear {
 public:
  // weight: this rank's slice [out_l, in] (column) or [out, in_l] (row); bias: [out_l] / [out], or
  // null. rows / local_rows: the full-sequence and residual-stream row counts (s b and s_l b).
  // `deferral_depth`: weight gradients that may be pending at once (leases allocated now; 0: none,
  // only kWithInputGrad).
  // `fp8`: when its scaling is given, the GEMMs run in FP8 with the scales of its (layer, linear).
  using Fp8Slot = LinearFp8Slot;
  Linear(std::string name, LinearKind kind, Param& weight, Param* bias, const TensorParallel& tp, int64_t rows,
         int64_t local_rows, int deferral_depth, Arena& arena, Fp8Slot fp8 = {});

  const std::string& name() const { return name_; }
  Param& weight() const { return weight_; }
  // The bias, undefined without one (row-parallel callers add it themselves).
  Tensor bias() const { return bias_ ? bias_->value : Tensor(); }
  // Bytes the deferral leases of a Linear with these sizes take.
  static int64_t deferral_bytes(LinearKind kind, const Shape& weight_shape, bool has_bias, bool sequence_parallel,
                                DType dtype, int64_t rows, int64_t local_rows, int deferral_depth);

  // Column-parallel: out [s b, out_l] from input [s_l, b, in], gathered into `gathered` [s, b, in]
  // under sequence parallelism. `pre_gelu`, when defined, makes out = gelu(x W^T + b) and receives
  // x W^T + b. Returns the full input the GEMM read (what the weight gradient reads).
  Tensor forward_column(Context& ctx, const Tensor& out, const Tensor& input, const Tensor& gathered,
                        const Tensor& pre_gelu = Tensor());
  // Row-parallel: input [s b, in_l] -> partial sums in `partial` [s, b, out] -> the TP sum in
  // [s_l, b, out] (`local` under sequence parallelism, else `partial` in place), returned.
  Tensor forward_row(Context& ctx, const Tensor& partial, const Tensor& input, const Tensor& local);

  // Column-parallel: grad_output [s b, out_l]; input: what forward_column was given [s_l, b, in]
  // (or its recomputed copy). Under sequence parallelism the forward's gathered input is not kept
  // (as in Megatron: it would be [s, b, in] per layer and microbatch in flight): it is gathered
  // again into `gathered` [s, b, in] while the input gradient's GEMM runs, for the weight gradient.
  // grad_input_full [s, b, in] scratch; the input gradient [s_l, b, in] is returned (in
  // grad_input_local under sequence parallelism, else grad_input_full).
  Tensor backward_input_column(Context& ctx, const Tensor& grad_output, const Tensor& input, const Tensor& gathered,
                               const Tensor& grad_input_full, const Tensor& grad_input_local, WeightGradTiming timing);
  // Row-parallel: grad_output [s_l, b, out], gathered into grad_output_full [s, b, out] under
  // sequence parallelism; input: what forward_row read. Writes and returns grad_input [s b, in_l].
  Tensor backward_input_row(Context& ctx, const Tensor& grad_output, const Tensor& input,
                            const Tensor& grad_output_full, const Tensor& grad_input, WeightGradTiming timing);
  // The oldest deferred weight gradient: accumulates into weight.grad (and bias.grad).
  void backward_weight(Context& ctx);
  int pending() const { return static_cast<int>(pending_.size()); }

 private:
  // What a weight gradient reads: the GEMM's input [rows, in], the output gradient [rows, out] and
  // the rows the bias gradient sums (the same tensor except row-parallel under SP: [local_rows, out]).
  struct WeightGradInputs {
    Tensor input, grad_output, bias_grad_output;
    bool leased = false;
    float input_scale = 1.0f, grad_output_scale = 1.0f;  // FP8's casts of input and grad_output
  };
  // FP8: the scale of `t` in `role`, from the amax of the whole tensor (reduced over the TP group
  // when this rank holds a slice: `split`).
  float fp8_scale(Context& ctx, const Tensor& t, Fp8Role role, bool split);
  // The FP8 operands of a GEMM (disabled without FP8).
  ops::MatmulOptions::Fp8Operands fp8_operands(Fp8Role a_role, float a_scale, Fp8Role b_role, float b_scale) const;
  bool input_split() const { return kind_ == LinearKind::kRowParallel; }
  bool grad_output_split() const { return kind_ == LinearKind::kColumnParallel; }
  void weight_grad(Context& ctx, const WeightGradInputs& inputs) const;
  // The GEMM of a forward or input-gradient pass, in FP8 when enabled: out = a op(W).
  void weight_gemm(Context& ctx, const Tensor& out, const Tensor& a, Fp8Role a_role, bool a_split,
                   ops::MatmulOptions options);
  void record(Context& ctx, WeightGradInputs inputs, WeightGradTiming timing);

  std::string name_;
  LinearKind kind_;
  Param& weight_;
  Param* bias_;
  const TensorParallel& tp_;
  LeaseRing leases_;
  std::deque<WeightGradInputs> pending_;
  Fp8Slot fp8_;
  float amax_ = 0.0f;  // FP8's amax reduction buffer (host: FP8 runs on the CPU backend)
};

}  // namespace gpt
