// Activation memory of a model chunk's transformer layers, with and without the configured
// recompute: the bytes the layers' stash slots and the chunk's recompute buffers take from the
// arena (each tensor rounded up to the arena's alignment), from the same lists that allocate them.
// A layer's input is the previous layer's output and is counted there; the chunk's first input
// (embedding output or pipeline receive buffer) is not a layer's.
//
// Per layer and microbatch in flight, with t bytes per element (2 for BF16), rows r = s b, local
// rows r_l = s_l b, p = heads_l d, f = ffn_l:
//   no recompute: t (4 r_l h + 4 r p + 2 r f) + 16 r_l + 4 b heads_l s (sequence parallelism stashes
//                 only the residual stream's r_l rows: backward gathers them again)
//   selective:    the same less the attention output and lse: t r p + 4 b heads_l s
//   full:         t r_l h on a group's last layer (the next group's input), nothing on the others
// plus, once per chunk, the shared buffers: one attention output and lse (selective), or one
// layer's activations per position of the longest group (full).
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/layer_shapes.h"

namespace gpt {

struct ActivationMemory {
  // Per microbatch in flight (stash slot): each layer of the chunk, in order.
  std::vector<int64_t> layer_stash_bytes;
  // Per microbatch in flight: the chunk's first layer without recompute (the same for every layer
  // of a dense chunk), and the chunk's layers without recompute (an MoE layer's differ).
  int64_t layer_stash_bytes_without_recompute = 0;
  int64_t chunk_stash_bytes_without_recompute = 0;
  // Once per chunk: the buffers recompute rebuilds activations into (0 without recompute).
  int64_t recompute_buffer_bytes = 0;

  int64_t layers() const { return static_cast<int64_t>(layer_stash_bytes.size()); }
  int64_t stash_bytes() const;  // per slot, every layer of the chunk
  int64_t stash_bytes_without_recompute() const { return chunk_stash_bytes_without_recompute; }
  // The chunk's layers with `slots` microbatches in flight.
  int64_t total_bytes(int64_t slots) const { return slots * stash_bytes() + recompute_buffer_bytes; }
  int64_t total_bytes_without_recompute(int64_t slots) const { return slots * stash_bytes_without_recompute(); }
};

// For a chunk of `chunk_layers` layers from global layer `first_layer` with config.recompute, from
// the chunk's shapes: each layer's own (LayerShapes::for_layer: an MoE layer keeps its router and
// expert-major stash instead of the dense MLP's). The expert bias an MoE layer keeps once
// (MoeBlock::persistent_bytes) is no activation and not counted here.
ActivationMemory activation_memory(const ModelConfig& config, const LayerShapes& shapes, int64_t first_layer,
                                   int64_t chunk_layers);
// The same from the layout's sizes (no communicator needed; activations are alike on every TP and
// CP rank: a context-parallel rank holds S / CP rows).
ActivationMemory activation_memory(const ModelConfig& config, int64_t tensor_parallel_size, bool sequence_parallel,
                                   int64_t micro_batch, int64_t chunk_layers, int64_t context_parallel_size = 1,
                                   int64_t first_layer = 0);

}  // namespace gpt
