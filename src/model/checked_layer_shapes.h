// The sizes the activation lists read (layer_activations.h, the blocks' lists, the workspace, the
// embedding's and output layer's stashes), in the arithmetic their byte counts are wanted in. The
// lists are templates over a Sizes type with LayerShapes' members: LayerShapes itself (int64_t, what
// the allocation uses) or CheckedLayerShapes, whose products are overflow-checked, so that the
// memory plan's closed form evaluates the same lists for layouts far too large to allocate
// (--hidden-size 2^31, a vocabulary of 2^62) and refuses them with a real figure or none.
#pragma once

#include <cstdint>
#include <optional>
#include <utility>

#include "core/checked_math.h"
#include "core/dtype.h"
#include "core/memory.h"
#include "model/layer_shapes.h"

namespace gpt {

// LayerShapes' sizes as CheckedBytes, and its products (rows(), local_qkv(), ...) checked. The flags
// that only select (context_size, context_inner, qk_layernorm) stay as they are.
struct CheckedLayerShapes {
  CheckedBytes sequence = 0, local_sequence = 0, batch = 0, hidden = 0;
  CheckedBytes local_heads = 0, local_groups = 0, head_dim = 0;
  CheckedBytes local_ffn = 0, local_fc1 = 0, local_vocab = 0;
  CheckedBytes experts = 0, moe_topk = 0, moe_rows = 0, moe_local_ffn = 0, moe_local_fc1 = 0;
  CheckedBytes moe_exchange_rows = 0, moe_send_rows = 0, moe_return_width = 0;
  bool moe_alltoall = false;
  CheckedBytes shared_local_ffn = 0, shared_local_fc1 = 0;
  int64_t context_size = 1;
  int64_t context_inner = 0;
  bool qk_layernorm = false;
  bool moe_layer = false;
  bool shared_expert = false;
  bool dense_mlp() const { return !moe_layer || shared_expert; }

  // The same formulas as LayerShapes'.
  CheckedBytes rows() const { return sequence * batch; }
  CheckedBytes local_rows() const { return local_sequence * batch; }
  CheckedBytes local_projection() const { return local_heads * head_dim; }
  CheckedBytes local_qkv() const { return (local_heads + CheckedBytes(2) * local_groups) * head_dim; }
  CheckedBytes query_head_rows() const { return rows() * local_heads; }
  CheckedBytes key_head_rows() const { return rows() * local_groups; }

  // The sizes of `s` (each a flag divided by a parallel size, so each fits in int64).
  static CheckedLayerShapes of(const LayerShapes& s) {
    return CheckedLayerShapes{.sequence = s.sequence,
                              .local_sequence = s.local_sequence,
                              .batch = s.batch,
                              .hidden = s.hidden,
                              .local_heads = s.local_heads,
                              .local_groups = s.local_groups,
                              .head_dim = s.head_dim,
                              .local_ffn = s.local_ffn,
                              .local_fc1 = s.local_fc1,
                              .local_vocab = s.local_vocab,
                              .experts = s.experts,
                              .moe_topk = s.moe_topk,
                              .moe_rows = s.moe_rows,
                              .moe_local_ffn = s.moe_local_ffn,
                              .moe_local_fc1 = s.moe_local_fc1,
                              .moe_exchange_rows = s.moe_exchange_rows,
                              .moe_send_rows = s.moe_send_rows,
                              .moe_return_width = s.moe_return_width,
                              .moe_alltoall = s.moe_alltoall,
                              .shared_local_ffn = s.shared_local_ffn,
                              .shared_local_fc1 = s.shared_local_fc1,
                              .context_size = s.context_size,
                              .context_inner = s.context_inner,
                              .qk_layernorm = s.qk_layernorm,
                              .moe_layer = s.moe_layer,
                              .shared_expert = s.shared_expert};
  }
};

inline int64_t larger(int64_t a, int64_t b) { return a > b ? a : b; }
inline CheckedBytes larger(CheckedBytes a, CheckedBytes b) {
  if (!a.value() || !b.value()) return CheckedBytes(std::nullopt);
  return *a.value() > *b.value() ? a : b;
}

// A full-recompute shared set of a chunk with MoE layers holds either kind of layer's activations:
// the MoE tensors, and the dense MLP's (or the shared expert's) at the larger width; each layer
// views the part and the width it uses (TransformerLayer).
template <typename Sizes>
Sizes either_layer_shapes(Sizes s) {
  s.moe_layer = true;
  s.shared_expert = true;
  s.local_ffn = larger(s.local_ffn, s.shared_local_ffn);
  s.local_fc1 = larger(s.local_fc1, s.shared_local_fc1);
  return s;
}

// The arithmetic of a Sizes type: int64_t for LayerShapes, CheckedBytes for CheckedLayerShapes.
template <typename Sizes>
using BytesOf = decltype(std::declval<const Sizes&>().rows());

inline int64_t round_up_to_alignment(int64_t bytes) {
  const auto alignment = static_cast<int64_t>(kAllocationAlignment);
  return (bytes + alignment - 1) / alignment * alignment;
}
inline CheckedBytes round_up_to_alignment(CheckedBytes bytes) {
  return bytes.round_up(static_cast<int64_t>(kAllocationAlignment));
}

// What the arena takes for a tensor of `dtype` and `dims` (Arena::aligned_bytes), in T.
template <typename T, typename... Dims>
T tensor_bytes(DType dtype, const Dims&... dims) {
  T bytes = T(static_cast<int64_t>(dtype_size(dtype)));
  ((bytes = bytes * T(dims)), ...);
  return round_up_to_alignment(bytes);
}

}  // namespace gpt
