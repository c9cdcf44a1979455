// The activations a transformer layer's backward reads, for one microbatch, and the buffers a
// chunk's recomputing layers share. Which tensors of a set exist depends on the recompute plan:
// a per-slot set holds what must survive until backward, a shared set what recompute rebuilds
// right before it. The tensors of a set are listed once (layer_activations.cc) for both their
// allocation and their byte count, so the memory report is the memory allocated.
#pragma once

#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "model/layer_shapes.h"
#include "model/recompute_plan.h"

namespace gpt {

struct LayerActivations {
  Tensor input;                       // [s_l, b, h] view of the previous layer's output (not allocated)
  Tensor ln1, ln1_mean, ln1_rstd;     // [s_l, b, h], [s_l b], [s_l b] (float32 statistics)
  Tensor qkv;                         // [s b, qkv_l]  ([s, b, groups_l, (q_per_group + 2) d] for attention)
  // --qk-layernorm: the query and key heads before their norms, [s b heads_l, d] and
  // [s b groups_l, d], and the norms' float32 statistics per head row.
  Tensor q_pre, q_mean, q_rstd;
  Tensor k_pre, k_mean, k_rstd;
  Tensor attention;                   // [s b, heads_l d]     } the attention core
  Tensor lse;                         // [b, heads_l, s]      } (float32 log-sum-exp)
  Tensor residual;                    // [s_l, b, h]  x + attention block
  Tensor ln2, ln2_mean, ln2_rstd;
  Tensor fc1_pre, fc1_act;            // [s, b, fc1_l] (2 ffn_l with SwiGLU: [gate | up]), [s, b, ffn_l]
  Tensor output;                      // [s_l, b, h]
};

// Which tensors of a set to allocate.
struct ActivationParts {
  bool main = true;            // everything but the attention core and the output
  bool attention_core = true;  // attention and lse
  bool output = true;

  static ActivationParts none() { return {false, false, false}; }
};

LayerActivations allocate_layer_activations(const LayerShapes& shapes, DType dtype, ActivationParts parts,
                                            Arena& arena);
// What allocate_layer_activations takes from the arena (each tensor rounded up to its alignment).
int64_t layer_activation_bytes(const LayerShapes& shapes, DType dtype, ActivationParts parts);

// What one layer keeps per slot under the plan (layer: the chunk-local index).
ActivationParts per_slot_parts(const RecomputePlan& plan, int64_t layer);

// Allocated once per chunk and shared by its layers: forward and backward of one layer (one
// group, under full recompute) finish before the next begins, so a single copy suffices.
struct RecomputeBuffers {
  // Full recompute: the activations of position p of every group; the longest group's last
  // position has no output (a group's last output is stashed per slot and never rebuilt).
  std::vector<LayerActivations> group;
  // Selective recompute: the attention output [s b, heads_l d] and its lse [b, heads_l, s].
  Tensor attention, lse;

  RecomputeBuffers(const RecomputePlan& plan, const LayerShapes& shapes, DType dtype, Arena& arena);
  static int64_t bytes(const RecomputePlan& plan, const LayerShapes& shapes, DType dtype);
};

}  // namespace gpt
