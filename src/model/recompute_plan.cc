#include "model/recompute_plan.h"

#include <algorithm>

#include "core/check.h"

namespace gpt {

int64_t RecomputePlan::shared_layer_sets() const {
  int64_t longest = 0;
  for (const LayerRecompute& layer : layers) {
    if (layer.stashing == LayerStashing::kGroupInput) longest = std::max(longest, layer.group_end - layer.group_begin);
  }
  return longest;
}

bool RecomputePlan::shared_attention_core() const {
  return std::any_of(layers.begin(), layers.end(),
                     [](const LayerRecompute& l) { return l.stashing == LayerStashing::kAllButAttentionCore; });
}

RecomputePlan plan_recompute(const RecomputeConfig& config, int64_t chunk_layers) {
  RecomputePlan plan;
  plan.layers.resize(static_cast<size_t>(chunk_layers));
  for (int64_t i = 0; i < chunk_layers; ++i) plan.layers[static_cast<size_t>(i)] = {.group_begin = i, .group_end = i + 1};
  switch (config.granularity) {
    case RecomputeGranularity::kNone:
      break;
    case RecomputeGranularity::kSelective:
      for (LayerRecompute& layer : plan.layers) layer.stashing = LayerStashing::kAllButAttentionCore;
      break;
    case RecomputeGranularity::kFull: {
      GPT_CHECK_GE(config.num_layers, 1) << "full recompute needs --recompute-num-layers >= 1";
      GPT_CHECK(config.method != RecomputeMethod::kNone) << "full recompute needs --recompute-method";
      const int64_t n = config.num_layers;
      for (int64_t i = 0; i < chunk_layers; ++i) {
        LayerRecompute& layer = plan.layers[static_cast<size_t>(i)];
        if (config.method == RecomputeMethod::kUniform) {
          layer.stashing = LayerStashing::kGroupInput;
          layer.group_begin = i / n * n;
          layer.group_end = std::min(layer.group_begin + n, chunk_layers);
        } else if (i < n) {
          layer.stashing = LayerStashing::kGroupInput;  // block: a group of one
        }
      }
      break;
    }
  }
  return plan;
}

}  // namespace gpt
