#include "model/transformer_layer.h"

#include <cmath>
#include <string>

#include "kernels/ops.h"

namespace gpt {
namespace {
std::string layer_prefix(int64_t layer) { return "decoder.layers." + std::to_string(layer) + "."; }
}  // namespace

TransformerLayer::TransformerLayer(const ModelConfig& config, int64_t layer, ParamStore& params,
                                   const TensorParallel& tp, const LayerShapes& s, LayerWorkspace& workspace,
                                   const RecomputePlan& plan, int64_t index_in_chunk, RecomputeBuffers& shared,
                                   Arena& arena, int stash_slots)
    : epsilon_(config.layernorm_epsilon),
      attention_scale_(1.0f / std::sqrt(static_cast<float>(s.head_dim))),
      tp_(tp),
      shapes_(s),
      ws_(workspace),
      recompute_(plan.layers.at(static_cast<size_t>(index_in_chunk))),
      ends_group_(recompute_.ends_group(index_in_chunk)),
      ln1_weight_(params.get(layer_prefix(layer) + "input_layernorm.weight")),
      ln1_bias_(params.get(layer_prefix(layer) + "input_layernorm.bias")),
      qkv_weight_(params.get(layer_prefix(layer) + "self_attention.linear_qkv.weight")),
      qkv_bias_(params.get(layer_prefix(layer) + "self_attention.linear_qkv.bias")),
      proj_weight_(params.get(layer_prefix(layer) + "self_attention.linear_proj.weight")),
      proj_bias_(params.get(layer_prefix(layer) + "self_attention.linear_proj.bias")),
      ln2_weight_(params.get(layer_prefix(layer) + "pre_mlp_layernorm.weight")),
      ln2_bias_(params.get(layer_prefix(layer) + "pre_mlp_layernorm.bias")),
      fc1_weight_(params.get(layer_prefix(layer) + "mlp.linear_fc1.weight")),
      fc1_bias_(params.get(layer_prefix(layer) + "mlp.linear_fc1.bias")),
      fc2_weight_(params.get(layer_prefix(layer) + "mlp.linear_fc2.weight")),
      fc2_bias_(params.get(layer_prefix(layer) + "mlp.linear_fc2.bias")) {
  if (recomputes_full()) {
    const auto position = static_cast<size_t>(recompute_.position_in_group(index_in_chunk));
    GPT_CHECK_LT(position, shared.group.size()) << "recompute buffers for layer " << layer;
    shared_ = &shared.group[position];
  }
  const bool selective = recompute_.stashing == LayerStashing::kAllButAttentionCore;
  GPT_CHECK(!selective || shared.attention.defined()) << "selective recompute without a shared attention buffer";
  // Only what must survive until backward is allocated per slot; the rest are views of the
  // chunk's shared buffers.
  const ActivationParts parts = per_slot_parts(plan, index_in_chunk);
  stash_.resize(static_cast<size_t>(stash_slots));
  for (LayerActivations& st : stash_) {
    st = allocate_layer_activations(s, config.dtype, tp.sequence_parallel(), parts, arena);
    if (selective) {
      st.attention = shared.attention;
      st.lse = shared.lse;
    }
    if (recomputes_full() && !ends_group_) st.output = shared_->output;  // read at once by the next layer
  }
}

Tensor TransformerLayer::heads_view(const Tensor& matrix, int parts) const {
  return matrix.view({shapes_.sequence, shapes_.batch, shapes_.local_heads, parts * shapes_.head_dim});
}

Tensor TransformerLayer::forward(Context& ctx, int slot, const Tensor& input) {
  LayerActivations& st = stash_[static_cast<size_t>(slot)];
  st.input = input;
  // Under full recompute the activations go to the shared set, which the next microbatch
  // overwrites: backward rebuilds them from the group's input.
  recomputed_slot_ = -1;
  LayerActivations& a = recomputes_full() ? *shared_ : st;
  forward_until_mlp_activation(ctx, a, input);
  forward_mlp_output(ctx, a, st.output);
  return st.output;
}

Tensor TransformerLayer::recompute(Context& ctx, int slot, const Tensor& input) {
  GPT_CHECK(recomputes_full()) << "recompute of a layer that stashes its activations";
  // The same ops on the same input as the slot's forward, TP/SP communication included (every TP
  // rank recomputes at the same point of its backward).
  forward_until_mlp_activation(ctx, *shared_, input);
  recomputed_slot_ = slot;
  if (ends_group_) return Tensor();
  forward_mlp_output(ctx, *shared_, shared_->output);
  return shared_->output;
}

void TransformerLayer::forward_until_mlp_activation(Context& ctx, LayerActivations& a, const Tensor& input) {
  a.input = input;
  // Attention block.
  ops::layernorm_forward(ctx, a.ln1, a.ln1_mean, a.ln1_rstd, input, ln1_weight_.value, ln1_bias_.value, epsilon_);
  const Tensor ln1_full = tp_.gather_input(ctx, a.ln1, a.ln1_gathered);                  // [s, b, h]
  ops::matmul(ctx, a.qkv, ln1_full, qkv_weight_.value, {.transpose_b = true, .bias = qkv_bias_.value});
  ops::attention_forward(ctx, heads_view(a.attention, 1), a.lse, heads_view(a.qkv, 3), attention_scale_);
  ops::matmul(ctx, ws_.full_a, a.attention, proj_weight_.value, {.transpose_b = true});  // partial [s, b, h]
  const Tensor attention_out = tp_.reduce_output(ctx, ws_.full_a, ws_.local_a);          // [s_l, b, h]
  // MLP block; the attention residual and its bias are fused into LN2.
  ops::residual_layernorm_forward(ctx, a.residual, a.ln2, a.ln2_mean, a.ln2_rstd, input, attention_out,
                                  proj_bias_.value, ln2_weight_.value, ln2_bias_.value, epsilon_);
  const Tensor ln2_full = tp_.gather_input(ctx, a.ln2, a.ln2_gathered);
  ops::matmul(ctx, a.fc1_act, ln2_full, fc1_weight_.value,
              {.transpose_b = true, .bias = fc1_bias_.value, .pre_gelu = a.fc1_pre});
}

void TransformerLayer::forward_mlp_output(Context& ctx, const LayerActivations& a, const Tensor& output) {
  ops::matmul(ctx, ws_.full_a, a.fc1_act, fc2_weight_.value, {.transpose_b = true});
  const Tensor mlp_out = tp_.reduce_output(ctx, ws_.full_a, ws_.local_a);
  ops::residual_add(ctx, output, a.residual, mlp_out, fc2_bias_.value);
}

Tensor TransformerLayer::backward(Context& ctx, int slot, const Tensor& grad_output, const Tensor& grad_input) {
  if (recomputes_full()) {
    GPT_CHECK_EQ(recomputed_slot_, slot) << "backward of a full-recompute layer before its group was recomputed";
    recomputed_slot_ = -1;
  }
  const LayerActivations& st = recomputes_full() ? *shared_ : stash_[static_cast<size_t>(slot)];
  const ops::MatmulOptions accumulate_weight_grad{.transpose_a = true, .beta = 1.0f};
  const Tensor ln1_full = tp_.sequence_parallel() ? st.ln1_gathered : st.ln1;
  const Tensor ln2_full = tp_.sequence_parallel() ? st.ln2_gathered : st.ln2;

  // MLP block: y = x2 + fc2(gelu(fc1(LN2(x2)))) + b2.
  ops::bias_grad(ctx, fc2_bias_.grad, grad_output);
  const Tensor d_mlp = tp_.gather_output_grad(ctx, grad_output, ws_.full_a);     // [s, b, h]
  ops::matmul(ctx, fc2_weight_.grad, d_mlp, st.fc1_act, accumulate_weight_grad);  // [h, ffn_l]
  ops::matmul(ctx, ws_.ffn, d_mlp, fc2_weight_.value);                            // [s, b, ffn_l]
  ops::gelu_backward(ctx, ws_.ffn, ws_.ffn, st.fc1_pre);
  ops::matmul(ctx, fc1_weight_.grad, ws_.ffn, ln2_full, accumulate_weight_grad);  // [ffn_l, h]
  ops::bias_grad(ctx, fc1_bias_.grad, ws_.ffn);
  ops::matmul(ctx, ws_.full_b, ws_.ffn, fc1_weight_.value);                       // [s, b, h]
  const Tensor d_ln2 = tp_.reduce_input_grad(ctx, ws_.full_b, ws_.local_a);      // [s_l, b, h]
  // d_residual = grad_output + LN2'(d_ln2), kept in local_b through the attention block.
  const Tensor d_residual = ws_.local_b;
  ops::layernorm_backward(ctx, d_residual, ln2_weight_.grad, ln2_bias_.grad, d_ln2, st.residual, st.ln2_mean,
                          st.ln2_rstd, ln2_weight_.value, /*accumulate_dx=*/false);
  ops::residual_add(ctx, d_residual, d_residual, grad_output, Tensor());

  // Attention block: x2 = x + proj(attn(qkv(LN1(x)))) + b_proj.
  if (recompute_.stashing == LayerStashing::kAllButAttentionCore) {
    // Selective recompute: the attention output and lse, into the chunk's shared buffers, from the
    // stashed qkv [s, b, heads_l, 3d]; proj's weight gradient and attention's backward read them.
    ops::attention_forward(ctx, heads_view(st.attention, 1), st.lse, heads_view(st.qkv, 3), attention_scale_);
  }
  ops::bias_grad(ctx, proj_bias_.grad, d_residual);
  const Tensor d_proj = tp_.gather_output_grad(ctx, d_residual, ws_.full_a);       // [s, b, h]
  ops::matmul(ctx, proj_weight_.grad, d_proj, st.attention, accumulate_weight_grad);  // [h, proj_l]
  ops::matmul(ctx, ws_.projection, d_proj, proj_weight_.value);                     // [s, b, proj_l]
  ops::attention_backward(ctx, heads_view(ws_.qkv, 3), heads_view(ws_.projection, 1), heads_view(st.qkv, 3),
                          heads_view(st.attention, 1), st.lse, attention_scale_);
  ops::matmul(ctx, qkv_weight_.grad, ws_.qkv, ln1_full, accumulate_weight_grad);   // [3 proj_l, h]
  ops::bias_grad(ctx, qkv_bias_.grad, ws_.qkv);
  ops::matmul(ctx, ws_.full_b, ws_.qkv, qkv_weight_.value);                        // [s, b, h]
  const Tensor d_ln1 = tp_.reduce_input_grad(ctx, ws_.full_b, ws_.local_a);
  ops::layernorm_backward(ctx, grad_input, ln1_weight_.grad, ln1_bias_.grad, d_ln1, st.input, st.ln1_mean,
                          st.ln1_rstd, ln1_weight_.value, /*accumulate_dx=*/false);
  ops::residual_add(ctx, grad_input, grad_input, d_residual, Tensor());
  return grad_input;
}

}  // namespace gpt
