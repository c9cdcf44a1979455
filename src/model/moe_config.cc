#include "model/moe_config.h"

#include <algorithm>
#include <cmath>

namespace gpt {

int64_t MoeConfig::moe_layer_count() const {
  if (!enabled()) return 0;
  return std::count(moe_layers.begin(), moe_layers.end(), true);
}

int64_t moe_capacity(const MoeConfig& moe, int64_t tokens) {
  const double even_share = static_cast<double>(tokens * moe.topk) / static_cast<double>(moe.num_experts);
  const auto capacity = static_cast<int64_t>(std::ceil(even_share * moe.capacity_factor));
  return std::min(capacity, tokens);
}

}  // namespace gpt
