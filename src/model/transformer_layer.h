// One pre-norm transformer layer with tensor-parallel attention and MLP:
//
//   a = N1(x);  x2 = x + D(proj(attn(rope(qkv(a)))));  b = N2(x2);  y = x2 + D(fc2(act(fc1(b))))
//
// (with --qk-layernorm, rope(Nq(q), Nk(k), v): each query and key head normalized over its d dims
// between the split of qkv into heads and RoPE, as Megatron's q_layernorm / k_layernorm),
// N is LayerNorm or RMSNorm, rope is applied only with rotary position embeddings, act is GeLU or
// SwiGLU, D is hidden dropout (with the projection's bias inside it, as Megatron's
// bias-dropout-add), and attention may group its query heads over shared key/value heads (GQA) and
// drop attention probabilities. qkv and fc1 are column-parallel (groups and ffn split across TP),
// proj and fc2 row-parallel (partial sums reduced across TP; their biases, when present, added
// once, after the reduction). Dropout masks depend only on global coordinates
// (kernels/dropout_mask.h), so every layout drops the same elements and backward regenerates them.
//
// The layer is two blocks with the norms and residual adds between them: the AttentionBlock
// (model/attention_block.h: qkv, the q/k norms, RoPE, the AttentionCore, proj and its dropout) and
// a FeedForwardBlock (model/mlp_block.h: the dense MlpBlock, fc1, the activation, fc2 and its
// dropout), each owning its modules and its part of the activation list. The layer owns N1, N2
// and the residual stream, so the attention block's output (and bias) fuses into N2. Backward is
// the blocks' input-gradient passes in reverse; each Linear's weight gradient runs inside its
// input-gradient pass (WeightGradTiming::kWithInputGrad, the fused order) or later, in
// backward_weight (kDeferred); both give bitwise the same gradients. The norms' parameter
// gradients come out of their fused backward kernels, in the input-gradient pass.
//
// Activation recompute (LayerRecompute, from the chunk's plan) changes only where activations
// live, never the arithmetic: the recomputed tensors come from the same ops on the same inputs,
// so gradients are bitwise those without recompute on the CPU backend. On the GPU every kernel of
// forward is deterministic, so the rebuilt activations are bitwise the originals there too; what
// differs between runs is cuDNN attention's backward, which accumulates with atomics unless
// --deterministic-mode, with or without recompute (identical with it, rounding-level without).
#pragma once

#include <memory>
#include <vector>

#include "model/attention_block.h"
#include "model/context_parallel.h"
#include "model/layer_activations.h"
#include "model/microbatch_position.h"
#include "model/mlp_block.h"
#include "model/moe_block.h"
#include "model/norm.h"
#include "model/param_store.h"

namespace gpt {

// The tensors of the layer's norms and residual stream in one forward: N1's output and statistics,
// the residual stream after the attention block (x2) and N2's output and statistics; [rows, h],
// the statistics [rows] float32.
struct LayerStream {
  Tensor ln1, ln1_mean, ln1_rstd;
  Tensor residual, ln2, ln2_mean, ln2_rstd;
};

// The layer's forward around its blocks, the one op sequence of TransformerLayer and of generation
// (generate/inference_model.cc, on checkpoint tensors), up to the MLP block's activation:
//   a = N1(x);  x2 = x + attention(a), fused into b = N2(x2);  mlp_up(b)
// `attention(a)` runs the attention block and returns its BlockOutput (the bias, when handed back,
// added with it); `mlp_up(b)` runs the MLP block up to its activation. NormT: Norm or NormForward.
template <typename NormT, typename Attention, typename MlpUp>
void layer_forward_up(Context& ctx, const NormT& norm1, const NormT& norm2, const LayerStream& t, const Tensor& x,
                      Attention&& attention, MlpUp&& mlp_up) {
  norm1.forward(ctx, t.ln1, t.ln1_mean, t.ln1_rstd, x);
  // The attention residual (and its bias, unless dropout added it) fused into the second norm.
  const BlockOutput attended = attention(t.ln1);
  norm2.residual_forward(ctx, t.residual, t.ln2, t.ln2_mean, t.ln2_rstd, x, attended.delta, attended.bias);
  mlp_up(t.ln2);
}

// The layer's output: y = x2 + the MLP block's output (and its bias, unless dropout added it).
void layer_forward_output(Context& ctx, const Tensor& output, const Tensor& residual, const BlockOutput& mlp);

class TransformerLayer {
 public:
  // `layer` is the global layer number, `index_in_chunk` its place in the chunk's recompute plan,
  // `shared` the chunk's recompute buffers, `positions` the chunk's per-slot microbatch positions
  // (dropout); `deferral_depth` the weight gradients that may wait at once (model/linear.h).
  TransformerLayer(const ModelConfig& config, int64_t layer, ParamStore& params, const TensorParallel& tp,
                   const LayerShapes& shapes, LayerWorkspace& workspace, const RecomputePlan& plan,
                   int64_t index_in_chunk, RecomputeBuffers& shared, Arena& arena, int stash_slots,
                   const std::vector<MicrobatchPosition>& positions, int deferral_depth = 0,
                   const ContextParallel& context = ContextParallel{}, Fp8Scaling* fp8 = nullptr,
                   const MoePass* moe_pass = nullptr, const ExpertParallel* experts = nullptr);

  // input [s_l, b, h] (kept by reference in the stash until backward) -> output [s_l, b, h],
  // owned by this layer's stash slot (or, inside a full-recompute group, by the shared buffers
  // until the next layer has read it).
  Tensor forward(Context& ctx, int slot, const Tensor& input);
  // Full recompute, in backward: re-runs forward of the slot's microbatch from `input` (the
  // group's stashed input, or the previous layer's recomputed output) into the shared buffers.
  // Returns the recomputed output, except on the group's last layer, whose output is stashed and
  // not needed by backward: there the recompute stops after fc1 (no fc2 GEMM, no reduction) and
  // returns nothing.
  Tensor recompute(Context& ctx, int slot, const Tensor& input);
  // The input-gradient pass: grad_output [s_l, b, h] -> grad_input [s_l, b, h]; grad_input may
  // alias grad_output. Under full recompute the group must have been recomputed for this slot
  // first. The linears' weight gradients run inside it, or wait for backward_weight (kDeferred).
  Tensor backward(Context& ctx, int slot, const Tensor& grad_output, const Tensor& grad_input,
                  WeightGradTiming timing = WeightGradTiming::kWithInputGrad);
  // The weight-gradient pass of the oldest deferred backward: the four linears' weights and biases
  // (the MLP block's, then the attention block's).
  void backward_weight(Context& ctx);
  // The constructor takes stash_slots x layer_activation_bytes(per_slot_parts) (GptModel::memory
  // counts them by kind), an MoE layer's expert bias once (MoeBlock::persistent_bytes, counted
  // there too) and these bytes of weight-gradient leases (model/linear.h).
  static int64_t deferral_bytes(const ModelConfig& config, const LayerShapes& shapes, bool sequence_parallel,
                                int deferral_depth);
  // The MoE block of an MoE layer, else null.
  MoeBlock* moe_block() const { return dynamic_cast<MoeBlock*>(mlp_.get()); }

  // The input the slot's forward was given (a full-recompute group restarts from it).
  const Tensor& stashed_input(int slot) const { return stash_[static_cast<size_t>(slot)].input; }

 private:
  bool recomputes_full() const { return recompute_.stashing == LayerStashing::kGroupInput; }
  // N1, the attention block, N2 and the MLP block up to its activation: every activation backward
  // reads, into `a`.
  void forward_until_mlp_activation(Context& ctx, int slot, LayerActivations& a, const Tensor& input);
  // The MLP block's output and the residual add: output [s_l, b, h] from `a`.
  void forward_mlp_output(Context& ctx, int slot, const LayerActivations& a, const Tensor& output);

  LayerWorkspace& ws_;
  LayerShapes shapes_;                  // this layer's (an MoE layer's differ from the chunk's)
  LayerRecompute recompute_;
  bool ends_group_;                     // full recompute: the group's last layer (output stashed)
  // Full recompute: the group position's shared set, viewed at this layer's sizes (in a chunk with
  // MoE layers the set holds either kind, model/checked_layer_shapes.h either_layer_shapes).
  LayerActivations shared_set_;
  LayerActivations* shared_ = nullptr;  // &shared_set_ under full recompute
  int recomputed_slot_ = -1;            // full recompute: whose activations the shared set holds
  Norm norm1_, norm2_;
  AttentionBlock attention_;
  std::unique_ptr<FeedForwardBlock> mlp_;
  // Per in-flight microbatch: what recompute_ says to keep (the rest are views of shared buffers).
  std::vector<LayerActivations> stash_;
};

}  // namespace gpt
