#include "model/attention_core.h"

#include <cmath>

#include "model/all_to_all_attention.h"
#include "model/context_parallel.h"
#include "model/ring_attention.h"

namespace gpt {

std::unique_ptr<AttentionCore> make_attention_core(const LayerShapes& shapes, const LayerWorkspace& workspace,
                                                   const ContextParallel& context, int64_t layer) {
  const float scale = 1.0f / std::sqrt(static_cast<float>(shapes.head_dim));
  if (context.size() == 1) return std::make_unique<LocalAttention>(scale);
  GPT_CHECK_EQ(context.size(), shapes.context_size) << "context-parallel group and layer shapes";
  switch (context.comm_type(layer)) {
    case ContextCommType::kRing:
      return std::make_unique<RingAttention>(shapes, *context.group, workspace, scale);
    case ContextCommType::kAllToAll:
      return std::make_unique<AllToAllAttention>(shapes, *context.group, workspace, scale);
    case ContextCommType::kAllToAllRing:
      GPT_CHECK(context.inner != nullptr && context.outer != nullptr) << "a2a+p2p without its two context levels";
      return std::make_unique<AllToAllAttention>(shapes, *context.inner, workspace, scale, context.outer);
  }
  GPT_FATAL() << "unknown context-parallel communication type";
}

}  // namespace gpt
