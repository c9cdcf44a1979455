#include "model/layer_shapes.h"

#include <algorithm>

#include "core/check.h"
#include "model/checked_layer_shapes.h"

namespace gpt {

std::vector<SequenceSegment> context_segments(int64_t global_sequence, int64_t context_size, int64_t context_rank,
                                              int64_t first, int64_t count) {
  GPT_CHECK(context_size >= 1 && context_rank >= 0 && context_rank < context_size) << "context rank " << context_rank
                                                                                   << " of " << context_size;
  GPT_CHECK_EQ(global_sequence % (2 * context_size), 0) << "sequence " << global_sequence << " over CP " << context_size;
  const int64_t chunk = global_sequence / (2 * context_size);
  GPT_CHECK(first >= 0 && count >= 0 && first + count <= 2 * chunk) << "rows " << first << " + " << count;
  const int64_t chunk_position[2] = {context_rank * chunk, (2 * context_size - 1 - context_rank) * chunk};
  std::vector<SequenceSegment> segments;
  for (int half = 0; half < 2; ++half) {
    const int64_t begin = std::max(first, half * chunk), end = std::min(first + count, (half + 1) * chunk);
    if (begin >= end) continue;
    const SequenceSegment piece{begin - first, end - begin, chunk_position[half] + begin - half * chunk};
    if (!segments.empty() && segments.back().position + segments.back().rows == piece.position) {
      segments.back().rows += piece.rows;  // consecutive (CP = 1)
    } else {
      segments.push_back(piece);
    }
  }
  return segments;
}

std::vector<SequenceSegment> LayerShapes::residual_segments() const {
  return segments(sequence_offset, local_sequence);
}

LayerShapes LayerShapes::make(const ModelConfig& c, const TensorParallel& tp, int64_t micro_batch,
                              int64_t context_size, int64_t context_rank) {
  return make(c, tp.size(), tp.rank(), tp.sequence_parallel(), micro_batch, context_size, context_rank);
}

LayerShapes LayerShapes::make(const ModelConfig& c, int64_t tp_size, int64_t tp_rank, bool sequence_parallel,
                              int64_t micro_batch, int64_t context_size, int64_t context_rank) {
  LayerShapes s;
  s.global_sequence = c.seq_length;
  s.context_size = context_size;
  s.context_rank = context_rank;
  s.sequence = c.seq_length / context_size;
  s.local_sequence = sequence_parallel ? s.sequence / tp_size : s.sequence;
  s.sequence_offset = sequence_parallel ? tp_rank * s.local_sequence : 0;
  s.batch = micro_batch;
  s.hidden = c.hidden_size;
  s.local_heads = c.num_attention_heads / tp_size;
  s.head_offset = tp_rank * s.local_heads;
  s.local_groups = c.query_groups() / tp_size;
  s.head_dim = c.kv_channels;
  s.local_ffn = c.ffn_hidden_size / tp_size;
  s.local_fc1 = c.fc1_size() / tp_size;
  s.qk_layernorm = c.qk_layernorm;
  if (c.moe.enabled()) {
    const int64_t gate = c.swiglu ? 2 : 1;
    s.experts = c.moe.num_experts;
    s.moe_topk = c.moe.topk;
    const int64_t etp = c.moe.expert_tensor_size(tp_size);
    s.moe_local_ffn = c.moe.ffn_hidden_size / etp;
    s.moe_local_fc1 = gate * s.moe_local_ffn;
    s.local_experts = c.moe.local_experts();
    s.shared_local_ffn = c.moe.shared_expert_size / tp_size;
    s.shared_local_fc1 = gate * s.shared_local_ffn;
    s.shared_expert = c.moe.shared_expert_size > 0;
    // Capacity segments: each TP rank's rows under sequence parallelism (Megatron's router sees
    // them), else the whole s b.
    s.moe_rows = expert_rows(c, s.sequence * s.batch, sequence_parallel ? tp_size : 1);
    if (c.moe.exchanges_tokens(tp_size)) {
      // Each of the group's N rows brings at most min(k, E / EP) pairs to this rank's experts
      // (dropless over the gathered rows: the routers dropped already, and nothing is padded).
      s.moe_exchange_rows = etp * c.moe.expert_model_parallel * s.local_sequence * s.batch;
      s.moe_rows = s.moe_exchange_rows * std::min(c.moe.topk, s.local_experts);
      if (c.moe.alltoall) {
        s.moe_alltoall = true;
        s.moe_return_width = c.moe.topk * etp;
        s.moe_send_rows = s.local_sequence * s.batch * s.moe_return_width;
      }
    }
  }
  s.local_vocab = c.padded_vocab_size / tp_size;
  s.vocab_start = tp_rank * s.local_vocab;
  const int64_t valid = c.vocab_size - s.vocab_start;
  s.vocab_valid = valid < 0 ? 0 : (valid > s.local_vocab ? s.local_vocab : valid);
  return s;
}

LayerShapes LayerShapes::for_layer(const ModelConfig& config, int64_t layer) const {
  if (!config.moe.is_moe_layer(layer)) return *this;
  LayerShapes s = *this;
  s.moe_layer = true;
  s.local_ffn = shared_local_ffn;
  s.local_fc1 = shared_local_fc1;
  return s;
}

int64_t LayerShapes::expert_rows(const ModelConfig& config, int64_t rows, int64_t capacity_segments) {
  const MoeConfig& moe = config.moe;
  if (moe.dropless() || !moe.pad_to_capacity) return rows * moe.topk;  // at most every pair kept
  // Padded: every expert gets exactly its capacity of each segment's rows.
  const int64_t segment = rows / capacity_segments;
  return moe.num_experts * capacity_segments * moe_capacity(moe, segment);
}

namespace {

// Calls visit(member, dims...) for every buffer of the workspace: the one list behind both the
// allocation and the byte count (dims in the arithmetic of `s`). fc1 is a view of ffn unless SwiGLU
// doubles fc1's output.
template <typename Sizes, typename TypedVisit>
void for_each_buffer(LayerWorkspace& w, const Sizes& s, DType dtype, TypedVisit&& visit_typed) {
  auto visit = [&](Tensor& member, const auto&... dims) { visit_typed(member, dtype, dims...); };
  visit(w.full_a, s.sequence, s.batch, s.hidden);
  visit(w.full_b, s.sequence, s.batch, s.hidden);
  visit(w.local_a, s.local_sequence, s.batch, s.hidden);
  visit(w.local_b, s.local_sequence, s.batch, s.hidden);
  visit(w.projection, s.rows(), s.local_projection());
  visit(w.qkv, s.rows(), s.local_qkv());
  visit(w.ffn, s.sequence, s.batch, s.local_ffn);
  if (s.local_fc1 != s.local_ffn) visit(w.fc1, s.sequence, s.batch, s.local_fc1);
  if (s.context_size > 1) {
    for (Tensor& buffer : w.context_qkv) visit(buffer, s.rows(), s.local_qkv());
    for (Tensor& buffer : w.context_out) visit(buffer, s.rows(), s.local_projection());
  }
  if (s.context_size > 1 && s.context_inner > 0) {
    for (Tensor& buffer : w.context_kv) visit(buffer, s.rows(), s.local_groups * 2 * s.head_dim);
  }
  if (s.experts != 0) {
    visit(w.moe_rows_a, s.moe_rows, s.hidden);
    visit(w.moe_rows_b, s.moe_rows, s.hidden);
    visit(w.moe_ffn, s.moe_rows, s.moe_local_ffn);
    if (s.moe_local_fc1 != s.moe_local_ffn) visit(w.moe_fc1, s.moe_rows, s.moe_local_fc1);
    visit_typed(w.moe_dlogits, DType::kFloat32, s.rows(), s.experts);
    visit(w.moe_dlogits_t, s.rows(), s.experts);
    visit_typed(w.moe_dweights, DType::kFloat32, s.rows(), s.moe_topk);
    visit_typed(w.moe_lse, DType::kFloat32, s.rows());
    visit_typed(w.moe_coefficients, DType::kFloat32, s.batch, s.experts);
    visit(w.moe_grad_input, s.local_sequence, s.batch, s.hidden);
    if (s.moe_exchange_rows != 0) {
      if (s.moe_alltoall) {
        visit(w.moe_send_a, s.moe_send_rows, s.hidden);
        visit(w.moe_send_b, s.moe_send_rows, s.hidden);
        visit(w.moe_received_a, s.moe_rows, s.hidden);
        visit(w.moe_received_b, s.moe_rows, s.hidden);
        visit_typed(w.moe_received_dweights, DType::kFloat32, s.moe_rows, 1);
        visit_typed(w.moe_returned_dweights, DType::kFloat32, s.moe_send_rows, 1);
      } else {
        visit(w.moe_exchange_a, s.moe_exchange_rows, s.hidden);
        visit(w.moe_exchange_b, s.moe_exchange_rows, s.hidden);
        visit_typed(w.moe_exchange_dweights, DType::kFloat32, s.moe_exchange_rows, s.moe_topk);
      }
      visit_typed(w.moe_route_own, DType::kInt32, s.local_rows(), 2 * s.moe_topk);
      visit_typed(w.moe_route_all, DType::kInt32, s.moe_exchange_rows, 2 * s.moe_topk);
      visit_typed(w.moe_own_dweights, DType::kFloat32, s.local_rows(), s.moe_topk);
    }
  }
  if (s.shared_expert) {
    visit(w.shared_ffn, s.sequence, s.batch, s.shared_local_ffn);
    if (s.shared_local_fc1 != s.shared_local_ffn) visit(w.shared_fc1, s.sequence, s.batch, s.shared_local_fc1);
  }
}

}  // namespace

LayerWorkspace::LayerWorkspace(const LayerShapes& s, DType dtype, Arena& arena) {
  for_each_buffer(*this, s, dtype,
                  [&](Tensor& member, DType t, auto... dims) { member = arena.allocate(t, Shape{dims...}); });
  if (s.local_fc1 == s.local_ffn) fc1 = ffn;
  if (s.moe_local_fc1 == s.moe_local_ffn) moe_fc1 = moe_ffn;
  if (s.shared_local_fc1 == s.shared_local_ffn) shared_fc1 = shared_ffn;
}

template <typename Sizes>
decltype(std::declval<const Sizes&>().rows()) LayerWorkspace::bytes(const Sizes& s, DType dtype) {
  using T = BytesOf<Sizes>;
  LayerWorkspace unused;
  T total = 0;
  for_each_buffer(unused, s, dtype,
                  [&](Tensor&, DType t, const auto&... dims) { total = total + tensor_bytes<T>(t, dims...); });
  return total;
}
template int64_t LayerWorkspace::bytes(const LayerShapes&, DType);
template CheckedBytes LayerWorkspace::bytes(const CheckedLayerShapes&, DType);

}  // namespace gpt
