#include "model/output_layer.h"

#include "core/phase_timer.h"
#include "kernels/ops.h"

namespace gpt {
namespace {
// The cross-entropy's per-row statistics of the microbatch in flight.
constexpr int64_t kRowStatistics = 5;

// Calls visit(member, dtype, dims...) for each tensor of a slot's stash: the one list behind both the
// allocation and the byte count (dims in the arithmetic of `s`).
template <typename Stash, typename Sizes, typename Visit>
void for_each_stash_tensor(Stash& st, const Sizes& s, DType dtype, Visit&& visit) {
  visit(st.targets, DType::kInt32, s.rows());
  visit(st.norm, dtype, s.local_sequence, s.batch, s.hidden);
  visit(st.mean, DType::kFloat32, s.local_rows());
  visit(st.rstd, DType::kFloat32, s.local_rows());
  visit(st.logits, dtype, s.rows(), s.local_vocab);
}

std::string head_name(const ModelConfig& config) {
  return config.untie_embeddings_and_output_weights ? "output_layer.weight" : kWordEmbeddingName;
}
}  // namespace

int64_t OutputLayer::deferral_bytes(const ModelConfig& config, const LayerShapes& s, bool sequence_parallel,
                                    int deferral_depth) {
  return Linear::deferral_bytes(LinearKind::kColumnParallel, Shape{s.local_vocab, s.hidden}, false, sequence_parallel,
                                config.dtype, s.rows(), s.local_rows(), deferral_depth);
}

OutputLayer::OutputLayer(const ModelConfig& config, ParamStore& params, const TensorParallel& tp,
                         const LayerShapes& s, LayerWorkspace& workspace, Arena& arena, int stash_slots,
                         int deferral_depth)
    : tp_(tp),
      shapes_(s),
      ws_(workspace),
      norm_(config, params, "decoder.final_layernorm"),
      head_("output_layer", LinearKind::kColumnParallel, params.get(head_name(config)), nullptr, tp, s.rows(),
            s.local_rows(), deferral_depth, arena) {
  for (Tensor* statistic : {&row_max_, &global_max_, &row_sumexp_, &target_logit_, &row_loss_}) {
    *statistic = arena.allocate(DType::kFloat32, {s.rows()});
  }
  stash_.resize(static_cast<size_t>(stash_slots));
  for (Stash& st : stash_) {
    for_each_stash_tensor(st, s, config.dtype,
                          [&](Tensor& member, DType t, auto... dims) { member = arena.allocate(t, Shape{dims...}); });
  }
}

int64_t OutputLayer::bytes(const ModelConfig& config, const LayerShapes& s, bool sequence_parallel, int stash_slots,
                           int deferral_depth) {
  return stash_bytes(s, config.dtype, int64_t{stash_slots}) +
         deferral_bytes(config, s, sequence_parallel, deferral_depth);
}

template <typename Sizes>
BytesOf<Sizes> OutputLayer::stash_bytes(const Sizes& s, DType dtype, BytesOf<Sizes> stash_slots) {
  using T = BytesOf<Sizes>;
  Stash unused;
  T per_slot = 0;
  for_each_stash_tensor(unused, s, dtype, [&](Tensor&, DType t, const auto&... dims) {
    per_slot = per_slot + tensor_bytes<T>(t, dims...);
  });
  return T(kRowStatistics) * tensor_bytes<T>(DType::kFloat32, s.rows()) + stash_slots * per_slot;
}
template int64_t OutputLayer::stash_bytes(const LayerShapes&, DType, int64_t);
template CheckedBytes OutputLayer::stash_bytes(const CheckedLayerShapes&, DType, CheckedBytes);

void OutputLayer::forward(Context& ctx, int slot, const Tensor& input, const LossAccumulator& loss) {
  Stash& st = stash_[static_cast<size_t>(slot)];
  st.input = input;
  norm_.forward(ctx, st.norm, st.mean, st.rstd, input);
  head_.forward_column(ctx, st.logits, st.norm, ws_.full_a);  // [s b, v_l]; SP: gathered again in backward

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

Tensor OutputLayer::backward(Context& ctx, int slot, const Tensor& grad_input, WeightGradTiming timing) {
  Stash& st = stash_[static_cast<size_t>(slot)];
  // The logits hold their gradient since forward.
  const Tensor d_norm =
      head_.backward_input_column(ctx, st.logits, st.norm, ws_.full_b, ws_.full_a, ws_.local_a, timing);
  norm_.backward(ctx, grad_input, d_norm, st.input, st.mean, st.rstd);
  return grad_input;
}

}  // namespace gpt
