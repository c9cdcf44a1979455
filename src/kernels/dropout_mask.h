// Dropout masks that do not depend on the parallel layout. Whether an element is kept is a pure
// function of (seed, iteration, layer, site) -> a Philox key, and of the element's global
// coordinates: the global sample index and the element's position inside that sample's global
// tensor. Every TP/SP/PP/DP layout therefore drops the same elements of the same global tensors,
// and backward regenerates the mask from the same coordinates instead of storing it (the cost is
// one Philox block per four elements, recomputed in backward; no mask bytes are kept).
//
// Positions inside one sample:
//   hidden dropout on [s, b, h] activations: position = global_token * h + channel, where
//     global_token = row_offset + local row (row_offset: the first token of a sequence-parallel
//     shard, 0 otherwise);
//   attention dropout on the probabilities [b, heads, s, s]: position = (global_head * s + query)
//     * s + key, with global_head = row_offset + local head (row_offset: the first head of this
//     tensor-parallel rank).
// The sample is sample_offset + local batch index (sample_offset: the global index of the
// microbatch's first sample in the iteration's global batch).
#pragma once

#include <cstdint>

#include "core/philox.h"

namespace gpt::ops {

// The dropout sites of a transformer layer (part of the key).
enum class DropoutSite : uint64_t {
  kAttentionProbabilities = 1,  // --attention-dropout, inside the attention core
  kAttentionOutput = 2,         // --hidden-dropout, after the attention projection (+ bias)
  kMlpOutput = 3,               // --hidden-dropout, after the MLP's second linear (+ bias)
  kEmbedding = 4,               // --hidden-dropout, on the embedding's output (layer -1)
};

struct DropoutMask {
  float probability = 0.0f;   // of dropping an element; 0: no dropout (the op is the identity)
  uint64_t key = 0;           // dropout_key(...)
  int64_t sample_offset = 0;  // global sample index of local batch index 0
  int64_t row_offset = 0;     // see above: first global token (hidden) or first global head (attention)
  bool enabled() const { return probability > 0.0f; }
};

// The Philox key of one site of one layer in one iteration (layer: the global layer number).
constexpr uint64_t dropout_key(uint64_t seed, int64_t iteration, int64_t layer, DropoutSite site) {
  uint64_t key = philox_key(seed, "dropout");
  key = splitmix64(key ^ static_cast<uint64_t>(iteration));
  key = splitmix64(key ^ static_cast<uint64_t>(layer));
  return splitmix64(key ^ static_cast<uint64_t>(site));
}

// The keep threshold of a drop probability: an element is kept when its 32 random bits are at or
// above probability * 2^32. Computed once per launch.
constexpr uint64_t dropout_threshold(float probability) {
  return static_cast<uint64_t>(static_cast<double>(probability) * 4294967296.0);
}

// True when element `position` of sample `sample` is kept: its 32 random bits are the word
// position % 4 of the Philox block (counter high = sample, low = position / 4). Kept elements are
// scaled by 1 / (1 - probability) (inverted dropout, as PyTorch's).
constexpr bool dropout_keeps(uint64_t key, uint64_t sample, uint64_t position, uint64_t threshold) {
  const PhiloxBlock block = philox4x32_10(key, sample, position / 4);
  return static_cast<uint64_t>(block[position % 4]) >= threshold;
}

}  // namespace gpt::ops
