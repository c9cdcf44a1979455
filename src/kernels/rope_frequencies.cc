#include "kernels/rope_frequencies.h"

#include <cmath>
#include <numbers>

namespace gpt {

std::vector<float> rope_inverse_frequencies(const RopeFrequencies& frequencies, int64_t rotary_dim) {
  const int64_t half = rotary_dim / 2;
  const float base = frequencies.base;
  std::vector<float> inv_freq(static_cast<size_t>(half));
  for (int64_t j = 0; j < half; ++j) {
    inv_freq[j] = 1.0f / std::pow(base, static_cast<float>(2 * j) / static_cast<float>(rotary_dim));
  }
  const RopeScaling& s = frequencies.scaling;
  if (!s.enabled) return inv_freq;
  // Megatron's torch arithmetic on an FP32 tensor: `c / t` is t.reciprocal() * c, the Python
  // scalars rounded to FP32 (the wavelength bounds are exact: powers of two over small factors).
  const float context = static_cast<float>(s.original_max_position_embeddings);
  const float two_pi = static_cast<float>(2.0 * std::numbers::pi);
  const float low_wavelen = static_cast<float>(static_cast<double>(s.original_max_position_embeddings) / s.low_freq_factor);
  const float high_wavelen = static_cast<float>(static_cast<double>(s.original_max_position_embeddings) / s.high_freq_factor);
  const float spread = static_cast<float>(static_cast<double>(s.high_freq_factor) - s.low_freq_factor);
  for (float& f : inv_freq) {
    const float wavelen = (1.0f / f) * two_pi;
    const float llama = wavelen > low_wavelen ? f / s.factor : f;
    const float smooth = ((1.0f / wavelen) * context - s.low_freq_factor) / spread;
    const float smoothed = ((1.0f - smooth) * llama) / s.factor + smooth * llama;
    const bool medium = !(wavelen < high_wavelen) && !(wavelen > low_wavelen);
    f = medium ? smoothed : llama;
  }
  return inv_freq;
}

}  // namespace gpt
