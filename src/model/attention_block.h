// The attention block of a pre-norm transformer layer, from the first norm's output to what it
// adds to the residual stream (the norms and the residual adds are the layer's,
// model/transformer_layer.h):
//
//   a [s_l, b, h] -> qkv (column-parallel) -> [q/k norms] -> RoPE -> attention core -> proj (row-parallel) -> D
//
// qkv [s b, qkv_l] holds per local group its query heads, its key and its value head (Megatron's
// packing). With --qk-layernorm each query and key head is normalized over its d dims between the
// split into heads and RoPE (Megatron's q_layernorm / k_layernorm). RoPE is applied only with
// rotary position embeddings, to the positions of this rank's rows; D is hidden dropout with
// proj's bias inside it (handed to the layer instead when nothing drops). The core
// (model/attention_core.h) may group queries over shared key/value heads and drop probabilities.
//
// The block owns its modules and the list of its activations (AttentionActivations: allocated and
// counted from the same list, model/layer_activations.h). Its scratch is the chunk's workspace,
// each buffer held through a Borrow (model/workspace_borrow.h) while the block needs it.
#pragma once

#include <memory>
#include <optional>

#include "model/attention_core.h"
#include "model/layer_block.h"
#include "model/norm.h"

namespace gpt {

// What the attention block's backward reads, for one microbatch.
struct AttentionActivations {
  Tensor qkv;  // [s b, qkv_l]  ([s, b, groups_l, (q_per_group + 2) d] for attention), rotated
  // --qk-layernorm: the query and key heads before their norms, [s b heads_l, d] and
  // [s b groups_l, d], and the norms' float32 statistics per head row.
  Tensor q_pre, q_mean, q_rstd;
  Tensor k_pre, k_mean, k_rstd;
  Tensor attention;  // [s b, heads_l d]  } the attention core's output
  Tensor lse;        // [b, heads_l, s]   } (float32 log-sum-exp): selective recompute rebuilds them

  // Calls visit(member, dtype, dims...) for each tensor: those before the core's, then (`core`) the
  // core's output and lse. The one list behind the allocation and the byte count; the dims in the
  // arithmetic of `s` (LayerShapes, or CheckedLayerShapes for the memory plan: checked_layer_shapes.h).
  template <typename Sizes, typename Visit>
  static void for_each_stashed(AttentionActivations& a, const Sizes& s, DType t, Visit&& visit);
  template <typename Sizes, typename Visit>
  static void for_each_core_output(AttentionActivations& a, const Sizes& s, DType t, Visit&& visit);
};

// --qk-layernorm's per-head step over qkv seen as `packed` [rows groups_l, (q + 2) d], the one op
// sequence of forward, backward and generation: each group's q query heads, then its key head, are
// copied out into rows of d (q_in [rows heads_l, d], k_in [rows groups_l, d]), `norm(key, y, x)`
// runs over those rows into q_out / k_out (which may be q_in / k_in: in place), and the result is
// copied back.
template <typename HeadNorm>
void apply_to_qk_heads(Context& ctx, const Tensor& packed, int64_t queries_per_group, int64_t head_dim,
                       const Tensor& q_in, const Tensor& q_out, const Tensor& k_in, const Tensor& k_out,
                       HeadNorm&& norm) {
  const int64_t rows = packed.rows(), query_columns = queries_per_group * head_dim;
  ops::copy_columns(ctx, q_in.view({rows, query_columns}), 0, packed, 0, query_columns, false);
  norm(/*key=*/false, q_out, q_in);
  ops::copy_columns(ctx, packed, 0, q_out.view({rows, query_columns}), 0, query_columns, false);
  ops::copy_columns(ctx, k_in, 0, packed, query_columns, head_dim, false);
  norm(/*key=*/true, k_out, k_in);
  ops::copy_columns(ctx, packed, query_columns, k_out, 0, head_dim, false);
}

class AttentionBlock {
 public:
  explicit AttentionBlock(const BlockBuild& build);

  // input [s_l, b, h] (the first norm's output) -> the block's output, its activations in `a`.
  BlockOutput forward(Context& ctx, int slot, const AttentionActivations& a, const Tensor& input);
  // The attention core alone, from a's (rotated) qkv into a.attention and a.lse: inside forward,
  // and again in backward under selective recompute.
  void core_forward(Context& ctx, int slot, const AttentionActivations& a) const;
  // grad_output [s_l, b, h] (the gradient of the block's output) -> the gradient of its input
  // [s_l, b, h], in the workspace (local_a under sequence parallelism, else full_a), read at once
  // by the caller. `input`: what forward was given. The linears' weight gradients run inside it or
  // wait for backward_weight (model/linear.h).
  Tensor backward_input(Context& ctx, int slot, const AttentionActivations& a, const Tensor& input,
                        const Tensor& grad_output, WeightGradTiming timing);
  // The oldest deferred weight gradients: proj's, then qkv's (the fused backward's order).
  void backward_weight(Context& ctx);
  // Bytes of the weight-gradient leases of its linears (model/linear.h).
  static int64_t deferral_bytes(const ModelConfig& config, const LayerShapes& shapes, bool sequence_parallel,
                                int deferral_depth);

 private:
  // --qk-layernorm, forward: every query and key head of a.qkv normalized in place over its d dims;
  // the heads before the norms and the norms' statistics go to `a`.
  void qk_norm_forward(Context& ctx, const AttentionActivations& a) const;
  // Backward, in place on dqkv [s b, qkv_l]: the query and key parts become the gradients of the
  // heads before the norms; the norms' parameter gradients accumulate.
  void qk_norm_backward(Context& ctx, const Tensor& dqkv, const AttentionActivations& a) const;
  // RoPE over qkv [s b, qkv_l] at the global positions of this rank's rows.
  void rope(Context& ctx, const Tensor& qkv, bool forward) const;
  // [s b, heads_l d] seen as [s, b, heads_l, d] and [s b, qkv_l] as [s, b, groups_l, (q + 2) d],
  // the attention core's layouts.
  Tensor heads_view(const Tensor& matrix) const;
  Tensor groups_view(const Tensor& matrix) const;

  const ModelConfig& config_;
  LayerShapes shapes_;
  LayerWorkspace& ws_;
  LayerDropout dropout_;
  std::optional<Norm> q_norm_, k_norm_;  // --qk-layernorm only
  Linear qkv_, proj_;                    // biases absent with --disable-bias-linear
  std::unique_ptr<AttentionCore> core_;
};

template <typename Sizes, typename Visit>
void AttentionActivations::for_each_stashed(AttentionActivations& a, const Sizes& s, DType t, Visit&& visit) {
  visit(a.qkv, t, s.rows(), s.local_qkv());
  if (s.qk_layernorm) {
    visit(a.q_pre, t, s.query_head_rows(), s.head_dim);
    visit(a.q_mean, DType::kFloat32, s.query_head_rows());
    visit(a.q_rstd, DType::kFloat32, s.query_head_rows());
    visit(a.k_pre, t, s.key_head_rows(), s.head_dim);
    visit(a.k_mean, DType::kFloat32, s.key_head_rows());
    visit(a.k_rstd, DType::kFloat32, s.key_head_rows());
  }
}

template <typename Sizes, typename Visit>
void AttentionActivations::for_each_core_output(AttentionActivations& a, const Sizes& s, DType t, Visit&& visit) {
  visit(a.attention, t, s.rows(), s.local_projection());
  visit(a.lse, DType::kFloat32, s.batch, s.local_heads, s.sequence);
}

}  // namespace gpt
