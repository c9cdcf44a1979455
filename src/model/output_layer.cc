#include "model/output_layer.h"

#include "core/phase_timer.h"
#include "kernels/ops.h"

namespace gpt {

OutputLayer::OutputLayer(const ModelConfig& config, ParamStore& params, const TensorParallel& tp,
                         const LayerShapes& s, LayerWorkspace& workspace, Arena& arena, int stash_slots)
    : tp_(tp),
      shapes_(s),
      ws_(workspace),
      norm_(config, params, "decoder.final_layernorm"),
      head_(params.get(config.untie_embeddings_and_output_weights ? "output_layer.weight" : kWordEmbeddingName)) {
  const int64_t rows = s.rows();
  row_max_ = arena.allocate(DType::kFloat32, {rows});
  global_max_ = arena.allocate(DType::kFloat32, {rows});
  row_sumexp_ = arena.allocate(DType::kFloat32, {rows});
  target_logit_ = arena.allocate(DType::kFloat32, {rows});
  row_loss_ = arena.allocate(DType::kFloat32, {rows});
  stash_.resize(static_cast<size_t>(stash_slots));
  for (Stash& st : stash_) {
    st.targets = arena.allocate(DType::kInt32, {rows});
    st.norm = arena.allocate(config.dtype, {s.local_sequence, s.batch, s.hidden});
    st.mean = arena.allocate(DType::kFloat32, {s.local_rows()});
    st.rstd = arena.allocate(DType::kFloat32, {s.local_rows()});
    if (tp.sequence_parallel()) st.norm_gathered = arena.allocate(config.dtype, {s.sequence, s.batch, s.hidden});
    st.logits = arena.allocate(config.dtype, {rows, s.local_vocab});
  }
}

void OutputLayer::forward(Context& ctx, int slot, const Tensor& input, const LossAccumulator& loss) {
  Stash& st = stash_[static_cast<size_t>(slot)];
  st.input = input;
  norm_.forward(ctx, st.norm, st.mean, st.rstd, input);
  const Tensor norm_full = tp_.gather_input(ctx, st.norm, st.norm_gathered);  // [s, b, h]
  ops::matmul(ctx, st.logits, norm_full, head_.value, {.transpose_b = true});  // [s b, v_l]

  ops::cross_entropy_stats(ctx, row_max_, row_sumexp_, target_logit_, st.logits, st.targets, shapes_.vocab_start,
                           shapes_.vocab_valid);
  Tensor max_for_loss = row_max_;
  if (tp_.size() > 1) {
    // Combine shards: a common maximum, then the sums of exp and the target logit (only the
    // shard holding the target contributes a non-zero logit).
    ops::copy(ctx, global_max_, row_max_);
    {
      const phase_timer::Scope timed(ctx, phase_timer::Phase::kTensorParallelComm);
      tp_.group().all_reduce(ctx, global_max_, ReduceOp::kMax);
    }
    ops::cross_entropy_rescale(ctx, row_sumexp_, row_max_, global_max_);
    const phase_timer::Scope timed(ctx, phase_timer::Phase::kTensorParallelComm);
    tp_.group().all_reduce(ctx, row_sumexp_, ReduceOp::kSum);
    tp_.group().all_reduce(ctx, target_logit_, ReduceOp::kSum);
    max_for_loss = global_max_;
  }
  ops::cross_entropy_loss(ctx, row_loss_, max_for_loss, row_sumexp_, target_logit_);
  ops::sum(ctx, loss.sum, row_loss_);
  if (loss.gradient_scale) {
    ops::cross_entropy_backward(ctx, st.logits, st.logits, st.targets, max_for_loss, row_sumexp_,
                                *loss.gradient_scale, shapes_.vocab_start, shapes_.vocab_valid);
  }
}

Tensor OutputLayer::backward(Context& ctx, int slot, const Tensor& grad_input) {
  Stash& st = stash_[static_cast<size_t>(slot)];
  const Tensor norm_full = tp_.sequence_parallel() ? st.norm_gathered : st.norm;
  ops::matmul(ctx, head_.grad, st.logits, norm_full, {.transpose_a = true, .beta = 1.0f});  // [v_l, h]
  ops::matmul(ctx, ws_.full_a, st.logits, head_.value);                                    // [s, b, h]
  const Tensor d_norm = tp_.reduce_input_grad(ctx, ws_.full_a, ws_.local_a);               // [s_l, b, h]
  norm_.backward(ctx, grad_input, d_norm, st.input, st.mean, st.rstd);
  return grad_input;
}

}  // namespace gpt
