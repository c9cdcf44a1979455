// Where a microbatch sits in training, for its dropout masks: the iteration and the global index
// of its first sample (the sampler's position in the split, data/microbatch.h). Evaluation and the
// forward-only test hooks run without dropout.
#pragma once

#include <cstdint>

#include "kernels/dropout_mask.h"
#include "model/config.h"

namespace gpt {

struct MicrobatchPosition {
  bool training = false;  // dropout applies
  int64_t iteration = 0;
  int64_t first_sample = 0;
};

// The mask of one dropout site (layer: the global layer number, -1 for the embedding; row_offset:
// see kernels/dropout_mask.h). Probability 0 outside training.
inline ops::DropoutMask dropout_mask(const ModelConfig& config, const MicrobatchPosition& position, int64_t layer,
                                     ops::DropoutSite site, int64_t row_offset) {
  const float probability =
      site == ops::DropoutSite::kAttentionProbabilities ? config.attention_dropout : config.hidden_dropout;
  if (!position.training || probability == 0.0f) return {};
  return {.probability = probability,
          .key = ops::dropout_key(config.seed, position.iteration, layer, site),
          .sample_offset = position.first_sample,
          .row_offset = row_offset};
}

}  // namespace gpt
