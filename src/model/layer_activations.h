// The activations a transformer layer's backward reads, for one microbatch, and the buffers a
// chunk's recomputing layers share. Which tensors of a set exist depends on the recompute plan:
// a per-slot set holds what must survive until backward, a shared set what recompute rebuilds
// right before it. The tensors of a set are listed once (layer_activations.cc) for both their
// allocation and their byte count, so the memory report is the memory allocated; each block lists
// its own part (AttentionActivations, MlpActivations).
#pragma once

#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "model/attention_block.h"
#include "model/layer_shapes.h"
#include "model/mlp_block.h"
#include "model/recompute_plan.h"

namespace gpt {

// The layer's own tensors (the norms' inputs and outputs, the residual stream) and its blocks'.
struct LayerActivations {
  Tensor input;                    // [s_l, b, h] view of the previous layer's output (not allocated)
  Tensor ln1, ln1_mean, ln1_rstd;  // [s_l, b, h], [s_l b], [s_l b] (float32 statistics)
  AttentionActivations attention;  // model/attention_block.h
  Tensor residual;                 // [s_l, b, h]  x + attention block
  Tensor ln2, ln2_mean, ln2_rstd;
  MlpActivations mlp;              // model/mlp_block.h
  Tensor output;                   // [s_l, b, h]
};

// Which tensors of a set to allocate.
struct ActivationParts {
  bool main = true;            // everything but the attention core's output and the layer's output
  bool attention_core = true;  // the attention core's output and lse
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
