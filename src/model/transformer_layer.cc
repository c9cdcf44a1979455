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
                                   Arena& arena, int stash_slots)
    : epsilon_(config.layernorm_epsilon),
      attention_scale_(1.0f / std::sqrt(static_cast<float>(s.head_dim))),
      tp_(tp),
      shapes_(s),
      ws_(workspace),
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
  const DType t = config.dtype;
  const int64_t local_rows = s.local_rows();
  stash_.resize(static_cast<size_t>(stash_slots));
  for (Stash& st : stash_) {
    st.ln1 = arena.allocate(t, {s.local_sequence, s.batch, s.hidden});
    st.ln1_mean = arena.allocate(DType::kFloat32, {local_rows});
    st.ln1_rstd = arena.allocate(DType::kFloat32, {local_rows});
    st.qkv = arena.allocate(t, {s.rows(), 3 * s.local_projection()});
    st.attention = arena.allocate(t, {s.rows(), s.local_projection()});
    st.lse = arena.allocate(DType::kFloat32, {s.batch, s.local_heads, s.sequence});
    st.residual = arena.allocate(t, {s.local_sequence, s.batch, s.hidden});
    st.ln2 = arena.allocate(t, {s.local_sequence, s.batch, s.hidden});
    st.ln2_mean = arena.allocate(DType::kFloat32, {local_rows});
    st.ln2_rstd = arena.allocate(DType::kFloat32, {local_rows});
    st.fc1_pre = arena.allocate(t, {s.sequence, s.batch, s.local_ffn});
    st.fc1_act = arena.allocate(t, {s.sequence, s.batch, s.local_ffn});
    st.output = arena.allocate(t, {s.local_sequence, s.batch, s.hidden});
    if (tp.sequence_parallel()) {
      st.ln1_gathered = arena.allocate(t, {s.sequence, s.batch, s.hidden});
      st.ln2_gathered = arena.allocate(t, {s.sequence, s.batch, s.hidden});
    }
  }
}

Tensor TransformerLayer::heads_view(const Tensor& matrix, int parts) const {
  return matrix.view({shapes_.sequence, shapes_.batch, shapes_.local_heads, parts * shapes_.head_dim});
}

Tensor TransformerLayer::forward(Context& ctx, int slot, const Tensor& input) {
  Stash& st = stash_[static_cast<size_t>(slot)];
  st.input = input;
  // Attention block.
  ops::layernorm_forward(ctx, st.ln1, st.ln1_mean, st.ln1_rstd, input, ln1_weight_.value, ln1_bias_.value, epsilon_);
  const Tensor ln1_full = tp_.gather_input(ctx, st.ln1, st.ln1_gathered);                 // [s, b, h]
  ops::matmul(ctx, st.qkv, ln1_full, qkv_weight_.value, {.transpose_b = true, .bias = qkv_bias_.value});
  ops::attention_forward(ctx, heads_view(st.attention, 1), st.lse, heads_view(st.qkv, 3), attention_scale_);
  ops::matmul(ctx, ws_.full_a, st.attention, proj_weight_.value, {.transpose_b = true});  // partial [s, b, h]
  const Tensor attention_out = tp_.reduce_output(ctx, ws_.full_a, ws_.local_a);          // [s_l, b, h]
  // MLP block; the attention residual and its bias are fused into LN2.
  ops::residual_layernorm_forward(ctx, st.residual, st.ln2, st.ln2_mean, st.ln2_rstd, input, attention_out,
                                  proj_bias_.value, ln2_weight_.value, ln2_bias_.value, epsilon_);
  const Tensor ln2_full = tp_.gather_input(ctx, st.ln2, st.ln2_gathered);
  ops::matmul(ctx, st.fc1_act, ln2_full, fc1_weight_.value,
              {.transpose_b = true, .bias = fc1_bias_.value, .pre_gelu = st.fc1_pre});
  ops::matmul(ctx, ws_.full_a, st.fc1_act, fc2_weight_.value, {.transpose_b = true});
  const Tensor mlp_out = tp_.reduce_output(ctx, ws_.full_a, ws_.local_a);
  ops::residual_add(ctx, st.output, st.residual, mlp_out, fc2_bias_.value);
  return st.output;
}

Tensor TransformerLayer::backward(Context& ctx, int slot, const Tensor& grad_output, const Tensor& grad_input) {
  Stash& st = stash_[static_cast<size_t>(slot)];
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
