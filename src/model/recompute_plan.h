// Which transformer layers of a model chunk recompute what, from the recompute flags and the
// chunk's layer count. The model builds its stashes from the plan and the memory report
// (model/activation_memory.h) sums the same plan, so the two cannot disagree.
//
// Megatron's rules (megatron/core/recompute.py, checkpointed_forward, over the layers of one
// TransformerBlock, i.e. one pipeline stage or virtual chunk):
//   full, uniform N: layers [0, N), [N, 2N), ... each recomputed as one unit from the unit's input;
//                    the last unit is shorter when N does not divide the layer count.
//   full, block N:   layers 0 .. N-1 each recomputed alone; the rest stash as usual.
//   selective:       every layer recomputes its core attention.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"

namespace gpt {

// What a layer keeps per in-flight microbatch (stash slot) for its backward.
enum class LayerStashing {
  kEverything,          // no recompute
  kAllButAttentionCore, // selective: the attention output and its lse are rebuilt from qkv
  kGroupInput,          // full: only the group's input (a view) and, on the group's last layer,
                        // its output (the next group's input); the rest is rebuilt in backward
};

struct LayerRecompute {
  LayerStashing stashing = LayerStashing::kEverything;
  // kGroupInput: the chunk-local layers [group_begin, group_end) recomputed together.
  int64_t group_begin = 0;
  int64_t group_end = 0;

  int64_t position_in_group(int64_t layer) const { return layer - group_begin; }
  bool ends_group(int64_t layer) const { return stashing == LayerStashing::kGroupInput && layer + 1 == group_end; }
};

struct RecomputePlan {
  std::vector<LayerRecompute> layers;  // [layers of the chunk]

  // Full recompute rebuilds a whole group at once: one shared activation set per position in the
  // longest group (0 without full recompute).
  int64_t shared_layer_sets() const;
  // Selective recompute rebuilds one layer's attention output at a time: one shared buffer.
  bool shared_attention_core() const;
};

// GPT_CHECKs the combinations that validate_arguments refuses (full without a method or with
// num_layers < 1). A block count above the chunk's layers recomputes every layer, as Megatron's
// loop does (validate_for_world refuses it).
RecomputePlan plan_recompute(const RecomputeConfig& config, int64_t chunk_layers);

}  // namespace gpt
