#include "model/attention_block.h"

#include "model/workspace_borrow.h"

namespace gpt {
namespace {
std::optional<Norm> head_norm(const BlockBuild& b, const char* name) {
  if (!b.config.qk_layernorm) return std::nullopt;
  return std::optional<Norm>(std::in_place, b.config, b.params, b.prefix() + "self_attention." + name);
}
}  // namespace

AttentionBlock::AttentionBlock(const BlockBuild& b)
    : config_(b.config),
      shapes_(b.shapes),
      ws_(b.workspace),
      dropout_(b.config, b.layer, b.shapes, b.positions),
      q_norm_(head_norm(b, "q_layernorm")),
      k_norm_(head_norm(b, "k_layernorm")),
      qkv_(b.linear("self_attention.linear_qkv", LinearKind::kColumnParallel, 0)),
      proj_(b.linear("self_attention.linear_proj", LinearKind::kRowParallel, 1)),
      core_(make_attention_core(b.shapes, b.workspace, b.context, b.layer)) {}

int64_t AttentionBlock::deferral_bytes(const ModelConfig& config, const LayerShapes& s, bool sequence_parallel,
                                       int deferral_depth) {
  auto bytes = [&](LinearKind kind, const Shape& weight, bool bias) {
    return Linear::deferral_bytes(kind, weight, bias, sequence_parallel, config.dtype, s.rows(), s.local_rows(),
                                  deferral_depth);
  };
  return bytes(LinearKind::kColumnParallel, Shape{s.local_qkv(), s.hidden}, config.has_qkv_bias()) +
         bytes(LinearKind::kRowParallel, Shape{s.hidden, s.local_projection()}, config.add_bias_linear);
}

Tensor AttentionBlock::heads_view(const Tensor& matrix) const {
  return matrix.view({shapes_.sequence, shapes_.batch, shapes_.local_heads, shapes_.head_dim});
}

Tensor AttentionBlock::groups_view(const Tensor& matrix) const {
  return matrix.view({shapes_.sequence, shapes_.batch, shapes_.local_groups,
                      (shapes_.queries_per_group() + 2) * shapes_.head_dim});
}

// qkv [s b, qkv_l] seen as [s b groups_l, (q_per_group + 2) d] (apply_to_qk_heads); the norms
// read the heads stashed in q_pre / k_pre and write into ws_.projection [s b, heads_l d], free until
// the core's output gradient in backward.
void AttentionBlock::qk_norm_forward(Context& ctx, const AttentionActivations& a) const {
  const LayerShapes& s = shapes_;
  const int64_t d = s.head_dim;
  const Borrow scratch(ws_.projection, "attention block: q/k norms' rows");
  const Tensor queries = scratch->view({s.query_head_rows(), d});
  const Tensor keys = scratch->flat_range(0, s.key_head_rows() * d).view({s.key_head_rows(), d});
  apply_to_qk_heads(ctx, a.qkv.view({s.rows() * s.local_groups, (s.queries_per_group() + 2) * d}),
                    s.queries_per_group(), d, a.q_pre, queries, a.k_pre, keys,
                    [&](bool key, const Tensor& y, const Tensor& x) {
                      if (key) {
                        k_norm_->forward(ctx, y, a.k_mean, a.k_rstd, x);
                      } else {
                        q_norm_->forward(ctx, y, a.q_mean, a.q_rstd, x);
                      }
                    });
}

void AttentionBlock::qk_norm_backward(Context& ctx, const Tensor& dqkv, const AttentionActivations& a) const {
  // The same copies as forward; each norm's backward runs in place (dx may alias dy).
  const LayerShapes& s = shapes_;
  const int64_t d = s.head_dim;
  const Borrow scratch(ws_.projection, "attention block: q/k norms' row gradients");
  const Tensor queries = scratch->view({s.query_head_rows(), d});
  const Tensor keys = scratch->flat_range(0, s.key_head_rows() * d).view({s.key_head_rows(), d});
  apply_to_qk_heads(ctx, dqkv.view({s.rows() * s.local_groups, (s.queries_per_group() + 2) * d}),
                    s.queries_per_group(), d, queries, queries, keys, keys,
                    [&](bool key, const Tensor& dx, const Tensor& dy) {
                      if (key) {
                        k_norm_->backward(ctx, dx, dy, a.k_pre, a.k_mean, a.k_rstd);
                      } else {
                        q_norm_->backward(ctx, dx, dy, a.q_pre, a.q_mean, a.q_rstd);
                      }
                    });
}

void AttentionBlock::rope(Context& ctx, const Tensor& qkv, bool forward) const {
  // Each run of consecutive global positions rotated at its own (context parallelism's chunks).
  const Tensor groups = groups_view(qkv);
  for (const SequenceSegment& segment : shapes_.segments(0, shapes_.sequence)) {
    const Tensor rows = groups.slice(segment.local_row, segment.local_row + segment.rows);
    if (forward) {
      ops::rope_forward(ctx, rows, shapes_.head_dim, config_.rotary_dim, config_.rope_frequencies(), segment.position,
                        config_.rotary_interleaved);
    } else {
      ops::rope_backward(ctx, rows, shapes_.head_dim, config_.rotary_dim, config_.rope_frequencies(),
                         segment.position, config_.rotary_interleaved);
    }
  }
}

BlockOutput AttentionBlock::forward(Context& ctx, int slot, const AttentionActivations& a, const Tensor& input) {
  {
    // Under sequence parallelism the input is gathered into full_a (free until proj's partial
    // sums): backward gathers it again rather than keep [s, b, h] per microbatch (Megatron's choice).
    const Borrow gathered(ws_.full_a, "attention block: qkv's gathered input");
    qkv_.forward_column(ctx, a.qkv, input, *gathered);  // [s b, qkv_l]
  }
  if (config_.qk_layernorm) qk_norm_forward(ctx, a);
  // Rotated in place: the stash keeps the rotated q and k that the core's backward reads.
  if (config_.position_embedding == PositionEmbedding::kRope) rope(ctx, a.qkv, /*forward=*/true);
  core_forward(ctx, slot, a);
  const Tensor out = proj_.forward_row(ctx, ws_.full_a, a.attention, ws_.local_a);  // [s_l, b, h]
  return dropout_.forward(ctx, slot, ops::DropoutSite::kAttentionOutput, out, proj_.bias());
}

void AttentionBlock::core_forward(Context& ctx, int slot, const AttentionActivations& a) const {
  core_->forward(ctx, heads_view(a.attention), a.lse, groups_view(a.qkv),
                 dropout_.mask(slot, ops::DropoutSite::kAttentionProbabilities));
}

Tensor AttentionBlock::backward_input(Context& ctx, int slot, const AttentionActivations& a, const Tensor& input,
                                      const Tensor& grad_output, WeightGradTiming timing) {
  // x2 = x + D(proj(attn(rope(qkv(a)))) + b_proj): the gradient of the core's output first.
  const Borrow d_qkv(ws_.qkv, "attention block: qkv's output gradient");
  {
    const Borrow d_core(ws_.projection, "attention block: the core's output gradient");
    {
      std::optional<Borrow> dropped;  // local_a, until proj's input gradient has read it
      Tensor d_proj_local = grad_output;
      if (dropout_.enabled(slot, ops::DropoutSite::kAttentionOutput)) {
        dropped.emplace(ws_.local_a, "attention block: gradient through its dropout");
        dropout_.backward(ctx, slot, ops::DropoutSite::kAttentionOutput, **dropped, grad_output);
        d_proj_local = **dropped;
      }
      proj_.backward_input_row(ctx, d_proj_local, a.attention, ws_.full_a, *d_core, timing);  // [s b, proj_l]
    }
    core_->backward_input(ctx, groups_view(*d_qkv), heads_view(*d_core), groups_view(a.qkv), heads_view(a.attention),
                          a.lse, dropout_.mask(slot, ops::DropoutSite::kAttentionProbabilities));
  }
  if (config_.position_embedding == PositionEmbedding::kRope) rope(ctx, *d_qkv, /*forward=*/false);
  if (config_.qk_layernorm) qk_norm_backward(ctx, *d_qkv, a);
  return qkv_.backward_input_column(ctx, *d_qkv, input, ws_.full_a, ws_.full_b, ws_.local_a, timing);
}

void AttentionBlock::backward_weight(Context& ctx) {
  proj_.backward_weight(ctx);
  qkv_.backward_weight(ctx);
}

}  // namespace gpt
