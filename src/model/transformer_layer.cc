#include "model/transformer_layer.h"

#include <cmath>
#include <string>

#include "kernels/ops.h"

namespace gpt {
namespace {
std::string layer_prefix(int64_t layer) { return "decoder.layers." + std::to_string(layer) + "."; }

// One of the layer's linears: prefix + ".weight", and prefix + ".bias" unless --disable-bias-linear.
// `slot`: the linear's index in the layer (FP8's state: qkv 0, proj 1, fc1 2, fc2 3);
// `context_group`: the context-parallel group, over which FP8 reduces the activations' amax.
Linear linear(const ModelConfig& config, ParamStore& params, const TensorParallel& tp, const LayerShapes& s,
              int64_t layer, const std::string& module, LinearKind kind, int deferral_depth, Arena& arena,
              Fp8Scaling* fp8, int slot, Communicator* context_group) {
  const std::string prefix = layer_prefix(layer) + module;
  Param* bias = config.add_bias_linear ? &params.get(prefix + ".bias") : nullptr;
  return Linear(prefix, kind, params.get(prefix + ".weight"), bias, tp, s.rows(), s.local_rows(), deferral_depth,
                arena, {.scaling = fp8, .layer = layer, .linear = slot, .context = context_group});
}

// The four linears' weight shapes on this rank ([out_l, in] column-parallel, [out, in_l] row).
struct LinearShape {
  LinearKind kind;
  Shape weight;
};
std::vector<LinearShape> linear_shapes(const LayerShapes& s) {
  return {{LinearKind::kColumnParallel, Shape{s.local_qkv(), s.hidden}},
          {LinearKind::kRowParallel, Shape{s.hidden, s.local_projection()}},
          {LinearKind::kColumnParallel, Shape{s.local_fc1, s.hidden}},
          {LinearKind::kRowParallel, Shape{s.hidden, s.local_ffn}}};
}
}  // namespace

TransformerLayer::TransformerLayer(const ModelConfig& config, int64_t layer, ParamStore& params,
                                   const TensorParallel& tp, const LayerShapes& s, LayerWorkspace& workspace,
                                   const RecomputePlan& plan, int64_t index_in_chunk, RecomputeBuffers& shared,
                                   Arena& arena, int stash_slots, const std::vector<MicrobatchPosition>& positions,
                                   int deferral_depth, const ContextParallel& context, Fp8Scaling* fp8)
    : config_(config),
      layer_(layer),
      tp_(tp),
      shapes_(s),
      ws_(workspace),
      recompute_(plan.layers.at(static_cast<size_t>(index_in_chunk))),
      ends_group_(recompute_.ends_group(index_in_chunk)),
      positions_(positions),
      norm1_(config, params, layer_prefix(layer) + "input_layernorm"),
      norm2_(config, params, layer_prefix(layer) + "pre_mlp_layernorm"),
      q_norm_(config.qk_layernorm ? std::optional<Norm>(std::in_place, config, params,
                                                        layer_prefix(layer) + "self_attention.q_layernorm")
                                  : std::nullopt),
      k_norm_(config.qk_layernorm ? std::optional<Norm>(std::in_place, config, params,
                                                        layer_prefix(layer) + "self_attention.k_layernorm")
                                  : std::nullopt),
      qkv_(linear(config, params, tp, s, layer, "self_attention.linear_qkv", LinearKind::kColumnParallel,
                  deferral_depth, arena, fp8, 0, context.group)),
      proj_(linear(config, params, tp, s, layer, "self_attention.linear_proj", LinearKind::kRowParallel,
                   deferral_depth, arena, fp8, 1, context.group)),
      fc1_(linear(config, params, tp, s, layer, "mlp.linear_fc1", LinearKind::kColumnParallel, deferral_depth, arena,
                  fp8, 2, context.group)),
      fc2_(linear(config, params, tp, s, layer, "mlp.linear_fc2", LinearKind::kRowParallel, deferral_depth, arena,
                  fp8, 3, context.group)),
      attention_(make_attention_core(s, workspace, context, layer)) {
  GPT_CHECK_EQ(positions.size(), static_cast<size_t>(stash_slots)) << "microbatch positions of layer " << layer;
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
    st = allocate_layer_activations(s, config.dtype, parts, arena);
    if (selective) {
      st.attention = shared.attention;
      st.lse = shared.lse;
    }
    if (recomputes_full() && !ends_group_) st.output = shared_->output;  // read at once by the next layer
  }
}

int64_t TransformerLayer::deferral_bytes(const ModelConfig& config, const LayerShapes& s, bool sequence_parallel,
                                        int deferral_depth) {
  int64_t total = 0;
  for (const LinearShape& linear : linear_shapes(s)) {
    total += Linear::deferral_bytes(linear.kind, linear.weight, config.add_bias_linear, sequence_parallel, config.dtype,
                                    s.rows(), s.local_rows(), deferral_depth);
  }
  return total;
}

int64_t TransformerLayer::bytes(const ModelConfig& config, const LayerShapes& s, bool sequence_parallel,
                                const RecomputePlan& plan, int64_t index_in_chunk, int stash_slots, int deferral_depth) {
  return stash_slots * layer_activation_bytes(s, config.dtype, per_slot_parts(plan, index_in_chunk)) +
         deferral_bytes(config, s, sequence_parallel, deferral_depth);
}

Tensor TransformerLayer::heads_view(const Tensor& matrix) const {
  return matrix.view({shapes_.sequence, shapes_.batch, shapes_.local_heads, shapes_.head_dim});
}

Tensor TransformerLayer::groups_view(const Tensor& matrix) const {
  return matrix.view({shapes_.sequence, shapes_.batch, shapes_.local_groups,
                      (shapes_.queries_per_group() + 2) * shapes_.head_dim});
}

Tensor TransformerLayer::residual_rows(const Tensor& x) const {
  return x.view({shapes_.local_sequence, shapes_.batch, shapes_.hidden});
}

ops::DropoutMask TransformerLayer::mask(int slot, ops::DropoutSite site) const {
  // Attention probabilities are numbered by global head, hidden activations by global token (each
  // run of consecutive tokens gets its own offset: hidden_dropout_*).
  const int64_t row_offset = site == ops::DropoutSite::kAttentionProbabilities ? shapes_.head_offset : 0;
  return dropout_mask(config_, positions_[static_cast<size_t>(slot)], layer_, site, row_offset);
}

void TransformerLayer::hidden_dropout_forward(Context& ctx, int slot, ops::DropoutSite site, const Tensor& out,
                                              const Tensor& x, const Tensor& bias) const {
  ops::DropoutMask dropout = mask(slot, site);
  for (const SequenceSegment& segment : shapes_.residual_segments()) {
    dropout.row_offset = segment.position;
    const int64_t end = segment.local_row + segment.rows;
    ops::dropout_forward(ctx, residual_rows(out).slice(segment.local_row, end),
                         residual_rows(x).slice(segment.local_row, end), bias, dropout);
  }
}

void TransformerLayer::hidden_dropout_backward(Context& ctx, int slot, ops::DropoutSite site, const Tensor& dx,
                                               const Tensor& dy) const {
  ops::DropoutMask dropout = mask(slot, site);
  for (const SequenceSegment& segment : shapes_.residual_segments()) {
    dropout.row_offset = segment.position;
    const int64_t end = segment.local_row + segment.rows;
    ops::dropout_backward(ctx, residual_rows(dx).slice(segment.local_row, end),
                          residual_rows(dy).slice(segment.local_row, end), dropout);
  }
}

// qkv [s b, qkv_l] seen as [s b groups_l, (q_per_group + 2) d]: a group's query heads are its
// first q_per_group d columns, its key head the next d. Each is copied out into rows of d, the norm
// runs over those rows (ws_.projection [s b, heads_l d] holds the result: it is free until the
// attention backward's output gradient), and the result copied back.
void TransformerLayer::qk_norm_forward(Context& ctx, LayerActivations& a) const {
  const LayerShapes& s = shapes_;
  const int64_t d = s.head_dim, query_columns = s.queries_per_group() * d;
  const Tensor groups = a.qkv.view({s.rows() * s.local_groups, (s.queries_per_group() + 2) * d});
  const Tensor normalized_queries = ws_.projection.view({s.query_head_rows(), d});
  ops::copy_columns(ctx, a.q_pre.view({groups.rows(), query_columns}), 0, groups, 0, query_columns, false);
  q_norm_->forward(ctx, normalized_queries, a.q_mean, a.q_rstd, a.q_pre);
  ops::copy_columns(ctx, groups, 0, normalized_queries.view({groups.rows(), query_columns}), 0, query_columns, false);
  const Tensor normalized_keys = ws_.projection.flat_range(0, s.key_head_rows() * d).view({s.key_head_rows(), d});
  ops::copy_columns(ctx, a.k_pre, 0, groups, query_columns, d, false);
  k_norm_->forward(ctx, normalized_keys, a.k_mean, a.k_rstd, a.k_pre);
  ops::copy_columns(ctx, groups, query_columns, normalized_keys, 0, d, false);
}

void TransformerLayer::qk_norm_backward(Context& ctx, const Tensor& dqkv, const LayerActivations& st) const {
  // The same copies as forward; each norm's backward runs in place (dx may alias dy).
  const LayerShapes& s = shapes_;
  const int64_t d = s.head_dim, query_columns = s.queries_per_group() * d;
  const Tensor groups = dqkv.view({s.rows() * s.local_groups, (s.queries_per_group() + 2) * d});
  const Tensor queries = ws_.projection.view({s.query_head_rows(), d});
  ops::copy_columns(ctx, queries.view({groups.rows(), query_columns}), 0, groups, 0, query_columns, false);
  q_norm_->backward(ctx, queries, queries, st.q_pre, st.q_mean, st.q_rstd);
  ops::copy_columns(ctx, groups, 0, queries.view({groups.rows(), query_columns}), 0, query_columns, false);
  const Tensor keys = ws_.projection.flat_range(0, s.key_head_rows() * d).view({s.key_head_rows(), d});
  ops::copy_columns(ctx, keys, 0, groups, query_columns, d, false);
  k_norm_->backward(ctx, keys, keys, st.k_pre, st.k_mean, st.k_rstd);
  ops::copy_columns(ctx, groups, query_columns, keys, 0, d, false);
}

void TransformerLayer::rope(Context& ctx, const Tensor& qkv, bool forward) const {
  // Each run of consecutive global positions rotated at its own (context parallelism's chunks).
  const Tensor groups = groups_view(qkv);
  for (const SequenceSegment& segment : shapes_.segments(0, shapes_.sequence)) {
    const Tensor rows = groups.slice(segment.local_row, segment.local_row + segment.rows);
    if (forward) {
      ops::rope_forward(ctx, rows, shapes_.head_dim, config_.rotary_dim, config_.rotary_base, segment.position,
                        config_.rotary_interleaved);
    } else {
      ops::rope_backward(ctx, rows, shapes_.head_dim, config_.rotary_dim, config_.rotary_base, segment.position,
                        config_.rotary_interleaved);
    }
  }
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
  forward_until_mlp_activation(ctx, slot, *shared_, input);
  recomputed_slot_ = slot;
  if (ends_group_) return Tensor();
  forward_mlp_output(ctx, slot, *shared_, shared_->output);
  return shared_->output;
}

void TransformerLayer::attention_forward(Context& ctx, int slot, const LayerActivations& a, const Tensor& attention,
                                         const Tensor& lse) const {
  attention_->forward(ctx, heads_view(attention), lse, groups_view(a.qkv),
                      mask(slot, ops::DropoutSite::kAttentionProbabilities));
}

void TransformerLayer::forward_until_mlp_activation(Context& ctx, int slot, LayerActivations& a,
                                                    const Tensor& input) {
  a.input = input;
  // Attention block.
  norm1_.forward(ctx, a.ln1, a.ln1_mean, a.ln1_rstd, input);
  // Under sequence parallelism ln1 is gathered into full_a (free until proj's partial sums):
  // backward gathers it again rather than keep [s, b, h] per microbatch (Megatron's choice).
  qkv_.forward_column(ctx, a.qkv, a.ln1, ws_.full_a);  // [s b, qkv_l]
  if (config_.qk_layernorm) qk_norm_forward(ctx, a);
  if (config_.position_embedding == PositionEmbedding::kRope) {
    // Rotated in place: the stash keeps the rotated q and k that attention's backward reads.
    rope(ctx, a.qkv, /*forward=*/true);
  }
  attention_forward(ctx, slot, a, a.attention, a.lse);
  const Tensor attention_out = proj_.forward_row(ctx, ws_.full_a, a.attention, ws_.local_a);  // [s_l, b, h]
  // MLP block; the attention residual (and its bias, unless dropout needs it inside) is fused into
  // the second norm.
  const ops::DropoutMask attention_dropout = mask(slot, ops::DropoutSite::kAttentionOutput);
  Tensor residual_bias = proj_.bias();
  if (attention_dropout.enabled()) {
    hidden_dropout_forward(ctx, slot, ops::DropoutSite::kAttentionOutput, attention_out, attention_out, residual_bias);
    residual_bias = Tensor();
  }
  norm2_.residual_forward(ctx, a.residual, a.ln2, a.ln2_mean, a.ln2_rstd, input, attention_out, residual_bias);
  if (config_.swiglu) {
    fc1_.forward_column(ctx, a.fc1_pre, a.ln2, ws_.full_a);
    ops::swiglu_forward(ctx, a.fc1_act.as_matrix(), a.fc1_pre.as_matrix());  // [s b, 2 ffn_l] -> [s b, ffn_l]
  } else if (config_.exact_gelu) {
    fc1_.forward_column(ctx, a.fc1_pre, a.ln2, ws_.full_a);
    ops::gelu_exact_forward(ctx, a.fc1_act, a.fc1_pre);  // [s, b, ffn_l]
  } else if (config_.squared_relu) {
    fc1_.forward_column(ctx, a.fc1_pre, a.ln2, ws_.full_a);
    ops::squared_relu_forward(ctx, a.fc1_act, a.fc1_pre);  // [s, b, ffn_l]
  } else {
    fc1_.forward_column(ctx, a.fc1_act, a.ln2, ws_.full_a, /*pre_gelu=*/a.fc1_pre);
  }
}

void TransformerLayer::forward_mlp_output(Context& ctx, int slot, const LayerActivations& a, const Tensor& output) {
  const Tensor mlp_out = fc2_.forward_row(ctx, ws_.full_a, a.fc1_act, ws_.local_a);  // [s_l, b, h]
  const ops::DropoutMask mlp_dropout = mask(slot, ops::DropoutSite::kMlpOutput);
  if (mlp_dropout.enabled()) {
    hidden_dropout_forward(ctx, slot, ops::DropoutSite::kMlpOutput, mlp_out, mlp_out, fc2_.bias());
    ops::residual_add(ctx, output, a.residual, mlp_out, Tensor());
  } else {
    ops::residual_add(ctx, output, a.residual, mlp_out, fc2_.bias());
  }
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

  // MLP block: y = x2 + D(fc2(act(fc1(N2(x2)))) + b2).
  Tensor d_mlp_local = grad_output;  // [s_l, b, h] gradient of fc2's output (+ bias)
  const ops::DropoutMask mlp_dropout = mask(slot, ops::DropoutSite::kMlpOutput);
  if (mlp_dropout.enabled()) {
    // local_b is free until the second norm's backward writes d_residual into it.
    hidden_dropout_backward(ctx, slot, ops::DropoutSite::kMlpOutput, ws_.local_b, grad_output);
    d_mlp_local = ws_.local_b;
  }
  fc2_.backward_input_row(ctx, d_mlp_local, st.fc1_act, ws_.full_a, ws_.ffn, timing);  // [s, b, ffn_l]
  Tensor d_fc1 = ws_.ffn;                                                              // [s, b, fc1_l]
  if (config_.swiglu) {
    ops::swiglu_backward(ctx, ws_.fc1.as_matrix(), ws_.ffn.as_matrix(), st.fc1_pre.as_matrix());
    d_fc1 = ws_.fc1;
  } else if (config_.exact_gelu) {
    ops::gelu_exact_backward(ctx, ws_.ffn, ws_.ffn, st.fc1_pre);
  } else if (config_.squared_relu) {
    ops::squared_relu_backward(ctx, ws_.ffn, ws_.ffn, st.fc1_pre);
  } else {
    ops::gelu_backward(ctx, ws_.ffn, ws_.ffn, st.fc1_pre);
  }
  // fc2's gathered output gradient in full_a is consumed: full_a takes ln2 gathered again.
  const Tensor d_ln2 =
      fc1_.backward_input_column(ctx, d_fc1, st.ln2, ws_.full_a, ws_.full_b, ws_.local_a, timing);  // [s_l, b, h]
  // d_residual = grad_output + N2'(d_ln2), kept in local_b through the attention block.
  const Tensor d_residual = ws_.local_b;
  norm2_.backward(ctx, d_residual, d_ln2, st.residual, st.ln2_mean, st.ln2_rstd);
  ops::residual_add(ctx, d_residual, d_residual, grad_output, Tensor());

  // Attention block: x2 = x + D(proj(attn(rope(qkv(N1(x))))) + b_proj).
  if (recompute_.stashing == LayerStashing::kAllButAttentionCore) {
    // Selective recompute: the attention output and lse, into the chunk's shared buffers, from the
    // stashed (rotated) qkv; proj's weight gradient and attention's backward read them.
    attention_forward(ctx, slot, st, st.attention, st.lse);
  }
  Tensor d_proj_local = d_residual;
  const ops::DropoutMask attention_dropout = mask(slot, ops::DropoutSite::kAttentionOutput);
  if (attention_dropout.enabled()) {
    // local_a is free until the first norm's input gradient is reduced into it.
    hidden_dropout_backward(ctx, slot, ops::DropoutSite::kAttentionOutput, ws_.local_a, d_residual);
    d_proj_local = ws_.local_a;
  }
  proj_.backward_input_row(ctx, d_proj_local, st.attention, ws_.full_a, ws_.projection, timing);  // [s b, proj_l]
  attention_->backward_input(ctx, groups_view(ws_.qkv), heads_view(ws_.projection), groups_view(st.qkv),
                             heads_view(st.attention), st.lse, mask(slot, ops::DropoutSite::kAttentionProbabilities));
  if (config_.position_embedding == PositionEmbedding::kRope) {
    rope(ctx, ws_.qkv, /*forward=*/false);
  }
  if (config_.qk_layernorm) qk_norm_backward(ctx, ws_.qkv, st);
  const Tensor d_ln1 = qkv_.backward_input_column(ctx, ws_.qkv, st.ln1, ws_.full_a, ws_.full_b, ws_.local_a, timing);
  norm1_.backward(ctx, grad_input, d_ln1, st.input, st.ln1_mean, st.ln1_rstd);
  ops::residual_add(ctx, grad_input, grad_input, d_residual, Tensor());
  return grad_input;
}

void TransformerLayer::backward_weight(Context& ctx) {
  // The order of the fused backward (each linear accumulates into its own parameters).
  fc2_.backward_weight(ctx);
  fc1_.backward_weight(ctx);
  proj_.backward_weight(ctx);
  qkv_.backward_weight(ctx);
}

}  // namespace gpt
