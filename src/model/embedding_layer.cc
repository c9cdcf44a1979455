#include "model/embedding_layer.h"

#include "kernels/ops.h"

namespace gpt {
namespace {

// Calls visit(member, dtype, dims...) for each tensor of a slot's stash: the one list behind both the
// allocation and the byte count (dims in the arithmetic of `s`).
template <typename Stash, typename Sizes, typename Visit>
void for_each_stash_tensor(Stash& st, const Sizes& s, DType dtype, Visit&& visit) {
  visit(st.tokens, DType::kInt32, s.rows());
  visit(st.output, dtype, s.local_sequence, s.batch, s.hidden);
}

}  // namespace

EmbeddingLayer::EmbeddingLayer(const ModelConfig& config, ParamStore& params, const TensorParallel& tp,
                               const LayerShapes& s, LayerWorkspace& workspace, Arena& arena, int stash_slots,
                               const std::vector<MicrobatchPosition>& positions, int deferral_depth)
    : config_(config),
      tp_(tp),
      shapes_(s),
      ws_(workspace),
      word_(params.get(kWordEmbeddingName)),
      position_(config.position_embedding == PositionEmbedding::kLearnedAbsolute
                    ? &params.get("embedding.position_embeddings.weight")
                    : nullptr),
      positions_(positions),
      leases_("embedding weight-gradient inputs",
              {{config.dtype, Shape{s.local_sequence, s.batch, s.hidden}}}, deferral_depth, arena) {
  stash_.resize(static_cast<size_t>(stash_slots));
  for (Stash& st : stash_) {
    for_each_stash_tensor(st, s, config.dtype,
                          [&](Tensor& member, DType t, auto... dims) { member = arena.allocate(t, Shape{dims...}); });
  }
}

int64_t EmbeddingLayer::bytes(const ModelConfig& config, const LayerShapes& s, int stash_slots, int deferral_depth) {
  return stash_bytes(s, config.dtype, int64_t{stash_slots}) + deferral_bytes(config, s, deferral_depth);
}

template <typename Sizes>
BytesOf<Sizes> EmbeddingLayer::stash_bytes(const Sizes& s, DType dtype, BytesOf<Sizes> stash_slots) {
  using T = BytesOf<Sizes>;
  Stash unused;
  T per_slot = 0;
  for_each_stash_tensor(unused, s, dtype, [&](Tensor&, DType t, const auto&... dims) {
    per_slot = per_slot + tensor_bytes<T>(t, dims...);
  });
  return stash_slots * per_slot;
}
template int64_t EmbeddingLayer::stash_bytes(const LayerShapes&, DType, int64_t);
template CheckedBytes EmbeddingLayer::stash_bytes(const CheckedLayerShapes&, DType, CheckedBytes);

ops::DropoutMask EmbeddingLayer::mask(int slot) const {
  return dropout_mask(config_, positions_[static_cast<size_t>(slot)], /*layer=*/-1, ops::DropoutSite::kEmbedding, 0);
}

Tensor EmbeddingLayer::segment_rows(const Tensor& x, const SequenceSegment& segment) const {
  return x.view({shapes_.local_sequence, shapes_.batch, shapes_.hidden})
      .slice(segment.local_row, segment.local_row + segment.rows);
}

Tensor EmbeddingLayer::forward(Context& ctx, int slot) {
  Stash& st = stash_[static_cast<size_t>(slot)];
  // Each TP rank looks up the tokens of its vocabulary shard (zeros elsewhere); the sum over TP
  // ranks is the full lookup. Without sequence parallelism the sum is formed in place.
  const Tensor partial = tp_.sequence_parallel() ? ws_.full_a : st.output;  // [s, b, h]
  ops::embedding_forward(ctx, partial.as_matrix(), st.tokens, word_.value, shapes_.vocab_start);
  tp_.reduce_output(ctx, partial, st.output);
  // Positions and dropout by global token: each run of consecutive positions on its own (context
  // parallelism's chunks, SP's shard).
  ops::DropoutMask dropout = mask(slot);
  for (const SequenceSegment& segment : shapes_.residual_segments()) {
    const Tensor rows = segment_rows(st.output, segment);
    if (position_) {
      ops::position_embedding_forward(ctx, rows.as_matrix(), position_->value, shapes_.batch, segment.position);
    }
    dropout.row_offset = segment.position;
    if (dropout.enabled()) ops::dropout_forward(ctx, rows, rows, Tensor(), dropout);
  }
  return st.output;
}

int64_t EmbeddingLayer::deferral_bytes(const ModelConfig& config, const LayerShapes& s, int deferral_depth) {
  return LeaseRing::bytes({{config.dtype, Shape{s.local_sequence, s.batch, s.hidden}}}, deferral_depth);
}

void EmbeddingLayer::backward(Context& ctx, int slot, const Tensor& grad_output, WeightGradTiming timing) {
  // The chunk's gradient buffer, free after this: the dropout gradient is formed in place.
  ops::DropoutMask dropout = mask(slot);
  if (dropout.enabled()) {
    for (const SequenceSegment& segment : shapes_.residual_segments()) {
      dropout.row_offset = segment.position;
      const Tensor rows = segment_rows(grad_output, segment);
      ops::dropout_backward(ctx, rows, rows, dropout);
    }
  }
  if (timing == WeightGradTiming::kWithInputGrad) {
    GPT_CHECK(pending_.empty()) << "embedding: a fused backward while deferred weight gradients are pending";
    weight_grad(ctx, slot, grad_output);
    return;
  }
  ops::copy(ctx, leases_.acquire()[0], grad_output);
  pending_.push_back(slot);
}

void EmbeddingLayer::backward_weight(Context& ctx) {
  GPT_CHECK(!pending_.empty()) << "embedding: a weight-gradient pass without a deferred backward";
  const int slot = pending_.front();
  pending_.pop_front();
  // The oldest held lease is the one acquired for this slot (first in, first out).
  weight_grad(ctx, slot, leases_.oldest()[0]);
  leases_.release(ctx);
}

void EmbeddingLayer::weight_grad(Context& ctx, int slot, const Tensor& grad_output) {
  Stash& st = stash_[static_cast<size_t>(slot)];
  if (position_) {
    for (const SequenceSegment& segment : shapes_.residual_segments()) {
      ops::position_embedding_backward(ctx, position_->grad, segment_rows(grad_output, segment).as_matrix(),
                                       shapes_.batch, segment.position);
    }
  }
  const Tensor grad_full = tp_.gather_output_grad(ctx, grad_output, ws_.full_a);  // [s, b, h]
  ops::embedding_backward(ctx, word_.grad, grad_full.as_matrix(), st.tokens, shapes_.vocab_start);
}

}  // namespace gpt
