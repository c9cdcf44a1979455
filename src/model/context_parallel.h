// Context parallelism as the model sees it: the group of ranks that hold the other pieces of each
// sequence (layer_shapes.h's context_segments says which rows a rank holds) and how each layer's
// attention core talks across it (Megatron's --cp-comm-type, one for all layers or one per layer).
//   p2p: ring attention (model/ring_attention.h), K/V blocks travel around the group;
//   a2a: all-to-all from sequence-split to head-split and back (model/all_to_all_attention.h).
#pragma once

#include <cstdint>
#include <vector>

#include "core/check.h"
#include "parallel/comm/communicator.h"

namespace gpt {

enum class ContextCommType { kRing, kAllToAll };

struct ContextParallel {
  Communicator* group = nullptr;             // null: CP = 1
  std::vector<ContextCommType> comm_types;   // one for every layer, or one per layer

  int size() const { return group ? group->size() : 1; }
  int rank() const { return group ? group->rank() : 0; }
  ContextCommType comm_type(int64_t layer) const {
    if (comm_types.empty()) return ContextCommType::kRing;
    if (comm_types.size() == 1) return comm_types.front();
    GPT_CHECK(layer >= 0 && layer < static_cast<int64_t>(comm_types.size())) << "--cp-comm-type for layer " << layer;
    return comm_types[static_cast<size_t>(layer)];
  }
};

}  // namespace gpt
