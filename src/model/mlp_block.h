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

// What the MLP block's backward reads, for one microbatch.
struct MlpActivations {
  Tensor fc1_pre;  // [s, b, fc1_l]  fc1's output (2 ffn_l with SwiGLU: [gate | up])
  Tensor fc1_act;  // [s, b, ffn_l]  the activation, fc2's input

  // Calls visit(member, dtype, dims...) for each tensor: the one list behind the allocation and the
  // byte count, the dims in the arithmetic of `s` (LayerShapes or CheckedLayerShapes).
  template <typename Sizes, typename Visit>
  static void for_each_stashed(MlpActivations& a, const Sizes& s, DType t, Visit&& visit) {
    visit(a.fc1_pre, t, s.sequence, s.batch, s.local_fc1);
    visit(a.fc1_act, t, s.sequence, s.batch, s.local_ffn);
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
  // The activation's gradient: from fc2's input gradient d_act (ws_.ffn) to fc1's output gradient,
  // returned (ws_.ffn in place, or ws_.fc1 [s, b, 2 ffn_l] with SwiGLU).
  Tensor activation_backward(Context& ctx, const MlpActivations& a) const;

  MlpActivation activation_;
  LayerWorkspace& ws_;
  LayerDropout dropout_;
  Linear fc1_, fc2_;  // biases absent with --disable-bias-linear
};

}  // namespace gpt
