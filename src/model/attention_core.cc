#include "model/attention_core.h"

#include <cmath>

namespace gpt {

std::unique_ptr<AttentionCore> make_attention_core(const LayerShapes& shapes) {
  return std::make_unique<LocalAttention>(1.0f / std::sqrt(static_cast<float>(shapes.head_dim)));
}

}  // namespace gpt
