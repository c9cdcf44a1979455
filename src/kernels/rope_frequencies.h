// RoPE's inverse frequencies, computed once on the host for both backends (cpu/rope.cc and the
// launcher of cuda/rope.cu read the same values): inv_freq_j = 1 / base^(2j / rotary_dim) in FP32,
// as Megatron's RotaryEmbedding, optionally rescaled by Llama 3.1's frequency scaling.
//
// Llama 3.1's scaling (Megatron's --use-rope-scaling / --rope-scaling-factor, RotaryEmbedding.
// _apply_scaling; Hugging Face's rope_scaling {"rope_type": "llama3"}): with L the original context
// (8192), wavelen_j = 2 pi / inv_freq_j, low = L / low_freq_factor and high = L / high_freq_factor,
//   wavelen_j < high:            inv_freq_j                        (high frequencies kept)
//   wavelen_j > low:             inv_freq_j / factor               (low frequencies slowed down)
//   otherwise, with s = (L / wavelen_j - low_freq_factor) / (high_freq_factor - low_freq_factor):
//                                (1 - s) inv_freq_j / factor + s inv_freq_j
// every operation in FP32, in the order Megatron's torch code performs it.
#pragma once

#include <cstdint>
#include <vector>

namespace gpt {

struct RopeScaling {
  bool enabled = false;
  float factor = 8.0f;                               // Megatron's --rope-scaling-factor default
  // Fixed in Megatron (its _apply_scaling's defaults); Hugging Face's config may state others, which
  // hf import refuses.
  float low_freq_factor = 1.0f;
  float high_freq_factor = 4.0f;
  int64_t original_max_position_embeddings = 8192;
};

// What the RoPE ops take besides the shapes. A plain base converts (no scaling).
struct RopeFrequencies {
  RopeFrequencies(float base_, RopeScaling scaling_ = {}) : base(base_), scaling(scaling_) {}  // NOLINT(runtime/explicit)
  float base;
  RopeScaling scaling;
};

// inv_freq [rotary_dim / 2] (FP32).
std::vector<float> rope_inverse_frequencies(const RopeFrequencies& frequencies, int64_t rotary_dim);

}  // namespace gpt
