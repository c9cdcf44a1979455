// Context parallelism as the model sees it: the group of ranks that hold the other pieces of each
// sequence (layer_shapes.h's context_segments says which rows a rank holds) and how each layer's
// attention core talks across it (Megatron's --cp-comm-type, one for all layers or one per layer).
//   p2p: ring attention (model/ring_attention.h), K/V blocks travel around the group;
//   a2a: all-to-all from sequence-split to head-split and back (model/all_to_all_attention.h);
//   a2a+p2p: the all-to-all over level 0 of the group, then the ring over level 1 on its
//   head-split rows (--hierarchical-context-parallel-sizes [A, P], Megatron's hierarchical groups).
#pragma once

#include <cstdint>
#include <vector>

#include "core/check.h"
#include "parallel/comm/communicator.h"

namespace gpt {

enum class ContextCommType { kRing, kAllToAll, kAllToAllRing };

struct ContextParallel {
  Communicator* group = nullptr;             // null: CP = 1
  std::vector<ContextCommType> comm_types;   // one for every layer, or one per layer
  Communicator* inner = nullptr;             // a2a+p2p level 0 (all-to-all), null without it
  Communicator* outer = nullptr;             // a2a+p2p level 1 (ring)

  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  ContextCommType comm_type(int64_t layer) const {
    if (comm_types.empty()) return ContextCommType::kRing;
    if (comm_types.size() == 1) return comm_types.front();
    GPT_CHECK(layer >= 0 && layer < static_cast<int64_t>(comm_types.size())) << "--cp-comm-type for layer " << layer;
    return comm_types[static_cast<size_t>(layer)];
  }
  // a2a+p2p's level-0 size when some layer uses it (the workspace then holds the ring's blocks), else 0.
  int64_t inner_size() const {
    for (ContextCommType type : comm_types) {
      if (type == ContextCommType::kAllToAllRing) return inner ? inner->size() : 0;
    }
    return 0;
  }
};

}  // namespace gpt
