#include "model/transformer_layer.h"

#include <string>

#include "kernels/ops.h"
#include "model/workspace_borrow.h"

namespace gpt {
namespace {
std::string layer_prefix(int64_t layer) { return "decoder.layers." + std::to_string(layer) + "."; }
}  // namespace

TransformerLayer::TransformerLayer(const ModelConfig& config, int64_t layer, ParamStore& params,
                                   const TensorParallel& tp, const LayerShapes& s, LayerWorkspace& workspace,
                                   const RecomputePlan& plan, int64_t index_in_chunk, RecomputeBuffers& shared,
                                   Arena& arena, int stash_slots, const std::vector<MicrobatchPosition>& positions,
                                   int deferral_depth, const ContextParallel& context, Fp8Scaling* fp8,
                                   const MoePass* moe_pass, const ExpertParallel* experts)
    : ws_(workspace),
      shapes_(s.for_layer(config, layer)),
      recompute_(plan.layers.at(static_cast<size_t>(index_in_chunk))),
      ends_group_(recompute_.ends_group(index_in_chunk)),
      norm1_(config, params, layer_prefix(layer) + "input_layernorm"),
      norm2_(config, params, layer_prefix(layer) + "pre_mlp_layernorm"),
      attention_(
          BlockBuild{config, layer, params, tp, shapes_, workspace, arena, deferral_depth, context, fp8, positions}) {
  static const MoePass kNoMoe;  // layers built outside a chunk (tests): no load-balancing losses
  mlp_ = make_feed_forward_block(
      BlockBuild{config, layer, params, tp, shapes_, workspace, arena, deferral_depth, context, fp8, positions, experts},
      moe_pass ? *moe_pass : kNoMoe);
  GPT_CHECK_EQ(positions.size(), static_cast<size_t>(stash_slots)) << "microbatch positions of layer " << layer;
  if (recomputes_full()) {
    const auto position = static_cast<size_t>(recompute_.position_in_group(index_in_chunk));
    GPT_CHECK_LT(position, shared.group.size()) << "recompute buffers for layer " << layer;
    shared_set_ = shared.group[position];
    if (config.moe.enabled() && shapes_.dense_mlp()) {
      // The set's MLP tensors are the widest of the chunk's kinds: this layer's width, as a prefix.
      auto view = [&](const Tensor& t, int64_t width) {
        return t.flat_range(0, shapes_.rows() * width).view({shapes_.sequence, shapes_.batch, width});
      };
      shared_set_.mlp.fc1_pre = view(shared.group[position].mlp.fc1_pre, shapes_.local_fc1);
      shared_set_.mlp.fc1_act = view(shared.group[position].mlp.fc1_act, shapes_.local_ffn);
    }
    shared_ = &shared_set_;
  }
  const bool selective = recompute_.stashing == LayerStashing::kAllButAttentionCore;
  GPT_CHECK(!selective || shared.attention.defined()) << "selective recompute without a shared attention buffer";
  // Only what must survive until backward is allocated per slot; the rest are views of the
  // chunk's shared buffers.
  const ActivationParts parts = per_slot_parts(plan, index_in_chunk);
  stash_.resize(static_cast<size_t>(stash_slots));
  for (LayerActivations& st : stash_) {
    st = allocate_layer_activations(shapes_, config.dtype, parts, arena);
    if (selective) {
      st.attention.attention = shared.attention;
      st.attention.lse = shared.lse;
    }
    if (recomputes_full() && !ends_group_) st.output = shared_->output;  // read at once by the next layer
  }
}

int64_t TransformerLayer::deferral_bytes(const ModelConfig& config, const LayerShapes& s, bool sequence_parallel,
                                        int deferral_depth) {
  const int64_t mlp = s.moe_layer ? MoeBlock::deferral_bytes(config, s, sequence_parallel, deferral_depth)
                                  : MlpBlock::deferral_bytes(config, s, sequence_parallel, deferral_depth);
  return AttentionBlock::deferral_bytes(config, s, sequence_parallel, deferral_depth) + mlp;
}

Tensor TransformerLayer::forward(Context& ctx, int slot, const Tensor& input) {
  LayerActivations& st = stash_[static_cast<size_t>(slot)];
  st.input = input;
  // Under full recompute the activations go to the shared set, which the next microbatch
  // overwrites: backward rebuilds them from the group's input.
  recomputed_slot_ = -1;
  LayerActivations& a = recomputes_full() ? *shared_ : st;
  forward_until_mlp_activation(ctx, slot, a, input);
  forward_mlp_output(ctx, slot, a, st.output);
  return st.output;
}

Tensor TransformerLayer::recompute(Context& ctx, int slot, const Tensor& input) {
  GPT_CHECK(recomputes_full()) << "recompute of a layer that stashes its activations";
  // The same ops on the same input as the slot's forward, TP/SP communication and dropout masks
  // included (every TP rank recomputes at the same point of its backward).
  // An MoE block's second forward of the slot counts nothing again (routing and losses the same).
  MoeBlock* moe = moe_block();
  if (moe) moe->set_recomputing(true);
  forward_until_mlp_activation(ctx, slot, *shared_, input);
  if (moe) moe->set_recomputing(false);
  recomputed_slot_ = slot;
  if (ends_group_) {
    if (moe) moe->experts_down(ctx, slot, shared_->mlp);  // backward reads the experts' outputs
    return Tensor();
  }
  forward_mlp_output(ctx, slot, *shared_, shared_->output);
  return shared_->output;
}

void layer_forward_output(Context& ctx, const Tensor& output, const Tensor& residual, const BlockOutput& mlp) {
  ops::residual_add(ctx, output, residual, mlp.delta, mlp.bias);
}

void TransformerLayer::forward_until_mlp_activation(Context& ctx, int slot, LayerActivations& a,
                                                    const Tensor& input) {
  a.input = input;
  layer_forward_up(
      ctx, norm1_, norm2_, LayerStream{a.ln1, a.ln1_mean, a.ln1_rstd, a.residual, a.ln2, a.ln2_mean, a.ln2_rstd},
      input, [&](const Tensor& ln1) { return attention_.forward(ctx, slot, a.attention, ln1); },
      [&](const Tensor& ln2) { mlp_->forward_up(ctx, slot, a.mlp, ln2); });
}

void TransformerLayer::forward_mlp_output(Context& ctx, int slot, const LayerActivations& a, const Tensor& output) {
  layer_forward_output(ctx, output, a.residual, mlp_->forward_down(ctx, slot, a.mlp));
}

Tensor TransformerLayer::backward(Context& ctx, int slot, const Tensor& grad_output, const Tensor& grad_input,
                                  WeightGradTiming timing) {
  if (recomputes_full()) {
    GPT_CHECK_EQ(recomputed_slot_, slot) << "backward of a full-recompute layer before its group was recomputed";
    recomputed_slot_ = -1;
  }
  const LayerActivations& st = recomputes_full() ? *shared_ : stash_[static_cast<size_t>(slot)];
  // grad_output and grad_input may be the same buffer: grad_output is last read before grad_input
  // is first written (the first norm's backward).
  const Tensor d_ln2 = mlp_->backward_input(ctx, slot, st.mlp, st.ln2, grad_output, timing);  // [s_l, b, h]
  // d_residual = grad_output + N2'(d_ln2), held in local_b through the attention block.
  const Borrow d_residual(ws_.local_b, "transformer layer: the residual stream's gradient");
  norm2_.backward(ctx, *d_residual, d_ln2, st.residual, st.ln2_mean, st.ln2_rstd);
  ops::residual_add(ctx, *d_residual, *d_residual, grad_output, Tensor());
  if (recompute_.stashing == LayerStashing::kAllButAttentionCore) {
    // Selective recompute: the core's output and lse, into the chunk's shared buffers, from the
    // stashed (rotated) qkv; proj's weight gradient and the core's backward read them.
    attention_.core_forward(ctx, slot, st.attention);
  }
  const Tensor d_ln1 = attention_.backward_input(ctx, slot, st.attention, st.ln1, *d_residual, timing);
  norm1_.backward(ctx, grad_input, d_ln1, st.input, st.ln1_mean, st.ln1_rstd);
  ops::residual_add(ctx, grad_input, grad_input, *d_residual, Tensor());
  return grad_input;
}

void TransformerLayer::backward_weight(Context& ctx) {
  // The order of the fused backward (each linear accumulates into its own parameters).
  mlp_->backward_weight(ctx);
  attention_.backward_weight(ctx);
}

}  // namespace gpt
