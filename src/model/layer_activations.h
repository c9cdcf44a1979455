// The activations a transformer layer's backward reads, for one microbatch, and the buffers a
// chunk's recomputing layers share. Which tensors of a set exist depends on the recompute plan:
// a per-slot set holds what must survive until backward, a shared set what recompute rebuilds
// right before it. The tensors of a set are listed once (layer_activations.cc) for both their
// allocation and their byte count, so the memory report is the memory allocated; each block lists
// its own part (AttentionActivations, MlpActivations). The byte counts are templates over the sizes'
// arithmetic (checked_layer_shapes.h): int64_t for the allocation, overflow-checked for the memory
// plan's closed form, which evaluates one layer of each kind a chunk has (per_slot_classes) instead
// of every layer.
#pragma once

#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "model/attention_block.h"
#include "model/checked_layer_shapes.h"
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
  bool operator==(const ActivationParts&) const = default;
};

LayerActivations allocate_layer_activations(const LayerShapes& shapes, DType dtype, ActivationParts parts,
                                            Arena& arena);
// What allocate_layer_activations takes from the arena (each tensor rounded up to its alignment), in
// the arithmetic of `shapes` (LayerShapes or CheckedLayerShapes).
template <typename Sizes>
BytesOf<Sizes> layer_activation_bytes(const Sizes& shapes, DType dtype, ActivationParts parts);

// What one layer keeps per slot under the plan (layer: the chunk-local index).
ActivationParts per_slot_parts(const RecomputePlan& plan, int64_t layer);

// A chunk's layers that keep the same parts per slot, and how many they are.
struct LayerClass {
  ActivationParts parts;
  int64_t layers = 0;
};
// per_slot_parts over every layer of a chunk of `chunk_layers` (plan_recompute's), counted without
// listing the layers (a chunk may have 10^8): no recompute and selective keep one kind in every
// layer; full keeps the output of each group's last layer and nothing else in the group (uniform:
// ceil(L / N) groups; block: the first min(N, L) layers are groups of one, the rest keep everything).
std::vector<LayerClass> per_slot_classes(const RecomputeConfig& recompute, int64_t chunk_layers);

// The shared sets a chunk's recompute rebuilds into (RecomputePlan::shared_layer_sets and
// shared_attention_core).
struct SharedRecompute {
  int64_t layer_sets = 0;
  bool attention_core = false;
  bool operator==(const SharedRecompute&) const = default;
};
SharedRecompute shared_recompute(const RecomputePlan& plan);
// The same without listing the chunk's layers: the longest full-recompute group (uniform: min(N, L);
// block: 1), selective's one attention buffer.
SharedRecompute shared_recompute(const RecomputeConfig& recompute, int64_t chunk_layers);

// Allocated once per chunk and shared by its layers: forward and backward of one layer (one
// group, under full recompute) finish before the next begins, so a single copy suffices.
struct RecomputeBuffers {
  // Full recompute: the activations of position p of every group; the longest group's last
  // position has no output (a group's last output is stashed per slot and never rebuilt).
  std::vector<LayerActivations> group;
  // Selective recompute: the attention output [s b, heads_l d] and its lse [b, heads_l, s].
  Tensor attention, lse;

  RecomputeBuffers(const RecomputePlan& plan, const LayerShapes& shapes, DType dtype, Arena& arena);
  // What the constructor takes from its arena, in the arithmetic of `shapes`.
  template <typename Sizes>
  static BytesOf<Sizes> bytes(SharedRecompute shared, const Sizes& shapes, DType dtype);
  static int64_t bytes(const RecomputePlan& plan, const LayerShapes& shapes, DType dtype) {
    return bytes(shared_recompute(plan), shapes, dtype);
  }
};

}  // namespace gpt
