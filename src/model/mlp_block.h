// The MLP side of a pre-norm transformer layer, from the second norm's output to what it adds to
// the residual stream (the norms and the residual adds are the layer's, model/transformer_layer.h).
// FeedForwardBlock is the interface the layer runs; MlpBlock, the dense MLP, is its one
// implementation today, and the mixture-of-experts block is to be a second one beside it:
//
//   b [s_l, b, h] -> fc1 (column-parallel) -> act -> fc2 (row-parallel) -> D
//
// act is the tanh GeLU (fused into fc1's GEMM), the exact GeLU, squared ReLU or SwiGLU (fc1's
// output [gate | up], 2 ffn_l wide); D is hidden dropout with fc2's bias inside it (handed to the
// layer instead when nothing drops). Forward is split where a full-recompute group's last layer
// stops rebuilding (its output is stashed): forward_up leaves everything backward reads, forward_down
// produces the block's output. generate/inference_model.cc runs forward_up's op sequence
// (mlp_up_forward) on its own GEMMs.
#pragma once

#include <memory>

#include "model/layer_block.h"

namespace gpt {

// What the MLP block's backward reads, for one microbatch: the dense MLP's (or an MoE layer's
// shared expert's) and, in an MoE layer, the router's and the experts' (model/moe_block.h;
// T = s b rows, M the expert-major buffer's rows).
struct MlpActivations {
  Tensor fc1_pre;  // [s, b, fc1_l]  fc1's output (2 ffn_l with SwiGLU: [gate | up])
  Tensor fc1_act;  // [s, b, ffn_l]  the activation, fc2's input
  Tensor router_logits;   // [T, E] float32
  Tensor expert_indices;  // [T, k] int32  each token's experts
  Tensor expert_weights;  // [T, k] float32  their combine weights (0 where the pair was dropped)
  Tensor destination;     // [T, k] int32  each pair's row of the expert-major buffer (-1: dropped)
  Tensor source;          // [M] int32  each row's token (-1: padding)
  Tensor row_weights;     // [M] float32  each row's combine weight (0: padding)
  Tensor expert_fc1_pre;  // [M, fc1_e_l]
  Tensor expert_fc1_act;  // [M, ffn_e_l]
  Tensor expert_out;      // [M, h]  each row's expert output before its weight (TP partial sums)
  // Under expert parallelism, over the dispatcher group's N rows: each pair's row of this rank's
  // expert-major buffer (-1: another rank's expert, or dropped) and its combine weight (0 there).
  Tensor exchange_destination;  // [N, k] int32
  Tensor exchange_weights;      // [N, k] float32
  // ... with the alltoall dispatcher instead (model/moe_all_to_all.h's plan): this rank's row of
  // each sent row, the expert row of each received row, each own row's returned rows and weights.
  Tensor send_source;     // [S] int32
  Tensor received_row;    // [M] int32
  Tensor return_rows;     // [s_l b, k ETP] int32
  Tensor return_weights;  // [s_l b, k ETP] float32
  Tensor pair_rows;       // [s_l b k, ETP] int32 (allocated as [s_l b, k ETP])

  // Calls visit(member, dtype, dims...) for each tensor: the one list behind the allocation and the
  // byte count, the dims in the arithmetic of `s` (LayerShapes or CheckedLayerShapes).
  template <typename Sizes, typename Visit>
  static void for_each_stashed(MlpActivations& a, const Sizes& s, DType t, Visit&& visit) {
    if (s.dense_mlp()) {
      visit(a.fc1_pre, t, s.sequence, s.batch, s.local_fc1);
      visit(a.fc1_act, t, s.sequence, s.batch, s.local_ffn);
    }
    if (!s.moe_layer) return;
    visit(a.router_logits, DType::kFloat32, s.rows(), s.experts);
    visit(a.expert_indices, DType::kInt32, s.rows(), s.moe_topk);
    visit(a.expert_weights, DType::kFloat32, s.rows(), s.moe_topk);
    visit(a.destination, DType::kInt32, s.rows(), s.moe_topk);
    visit(a.source, DType::kInt32, s.moe_rows);
    visit(a.row_weights, DType::kFloat32, s.moe_rows);
    visit(a.expert_fc1_pre, t, s.moe_rows, s.moe_local_fc1);
    visit(a.expert_fc1_act, t, s.moe_rows, s.moe_local_ffn);
    visit(a.expert_out, t, s.moe_rows, s.hidden);
    if (s.moe_exchange_rows == 0) return;
    if (s.moe_alltoall) {
      visit(a.send_source, DType::kInt32, s.moe_send_rows);
      visit(a.received_row, DType::kInt32, s.moe_rows);
      visit(a.return_rows, DType::kInt32, s.local_rows(), s.moe_return_width);
      visit(a.return_weights, DType::kFloat32, s.local_rows(), s.moe_return_width);
      visit(a.pair_rows, DType::kInt32, s.local_rows(), s.moe_return_width);
      return;
    }
    visit(a.exchange_destination, DType::kInt32, s.moe_exchange_rows, s.moe_topk);
    visit(a.exchange_weights, DType::kFloat32, s.moe_exchange_rows, s.moe_topk);
  }
};

class FeedForwardBlock {
 public:
  virtual ~FeedForwardBlock() = default;
  // input [s_l, b, h] (the second norm's output) -> every activation backward reads, into `a`.
  virtual void forward_up(Context& ctx, int slot, const MlpActivations& a, const Tensor& input) = 0;
  // From `a` (forward_up's, of the same slot) to the block's output.
  virtual BlockOutput forward_down(Context& ctx, int slot, const MlpActivations& a) = 0;
  // grad_output [s_l, b, h] (the gradient of the block's output) -> the gradient of its input
  // [s_l, b, h], in the workspace (local_a under sequence parallelism, else full_a), read at once
  // by the caller. `input`: what forward_up was given. The weight gradients run inside it or wait
  // for backward_weight (model/linear.h).
  virtual Tensor backward_input(Context& ctx, int slot, const MlpActivations& a, const Tensor& input,
                                const Tensor& grad_output, WeightGradTiming timing) = 0;
  // The oldest deferred weight gradients.
  virtual void backward_weight(Context& ctx) = 0;
};

// The block a layer of this configuration runs (the dense MlpBlock).
std::unique_ptr<FeedForwardBlock> make_feed_forward_block(const BlockBuild& build);

enum class MlpActivation { kGelu, kExactGelu, kSquaredRelu, kSwiglu };
MlpActivation mlp_activation(const ModelConfig& config);

// fc1 and the activation, the one op sequence of training and generation: `fc1(out, pre_gelu)`
// runs fc1's GEMM with its bias into `out`, the tanh GeLU fused in when `pre_gelu` is defined
// (out = gelu(GEMM), pre_gelu = GEMM). pre [rows, fc1_l] and act [rows, ffn_l], in the caller's
// shapes ([s, b, .] in training, [n, .] in generation).
template <typename Fc1>
void mlp_up_forward(Context& ctx, MlpActivation kind, const Tensor& pre, const Tensor& act, Fc1&& fc1) {
  if (kind == MlpActivation::kGelu) {
    fc1(act, pre);
    return;
  }
  fc1(pre, Tensor());
  switch (kind) {
    case MlpActivation::kSwiglu:
      ops::swiglu_forward(ctx, act.as_matrix(), pre.as_matrix());  // [rows, 2 ffn_l] -> [rows, ffn_l]
      break;
    case MlpActivation::kExactGelu:
      ops::gelu_exact_forward(ctx, act, pre);
      break;
    case MlpActivation::kSquaredRelu:
      ops::squared_relu_forward(ctx, act, pre);
      break;
    case MlpActivation::kGelu:
      break;
  }
}

// The activation's backward over [rows, .]: from d_act (the activation's output gradient, [rows,
// ffn_l]) to fc1's output gradient, returned: d_act in place, or d_fc1 [rows, 2 ffn_l] with SwiGLU.
// fc1_pre: fc1's output (forward's `pre`).
Tensor mlp_activation_backward(Context& ctx, MlpActivation kind, const Tensor& d_act, const Tensor& d_fc1,
                               const Tensor& fc1_pre);

class MlpBlock final : public FeedForwardBlock {
 public:
  explicit MlpBlock(const BlockBuild& build);

  void forward_up(Context& ctx, int slot, const MlpActivations& a, const Tensor& input) override;
  BlockOutput forward_down(Context& ctx, int slot, const MlpActivations& a) override;
  Tensor backward_input(Context& ctx, int slot, const MlpActivations& a, const Tensor& input,
                        const Tensor& grad_output, WeightGradTiming timing) override;
  // fc2's, then fc1's (the fused backward's order).
  void backward_weight(Context& ctx) override;
  // Bytes of the weight-gradient leases of its linears (model/linear.h).
  static int64_t deferral_bytes(const ModelConfig& config, const LayerShapes& shapes, bool sequence_parallel,
                                int deferral_depth);

 private:
  MlpActivation activation_;
  LayerWorkspace& ws_;
  LayerDropout dropout_;
  Linear fc1_, fc2_;  // biases absent with --disable-bias-linear
};

}  // namespace gpt
