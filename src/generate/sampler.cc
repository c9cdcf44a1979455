#include "generate/sampler.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "core/philox.h"

namespace gpt {

int32_t Sampler::next(std::span<const float> logits, int64_t sequence, int64_t step) {
  const auto vocab = static_cast<int64_t>(logits.size());
  if (options_.greedy || options_.temperature <= 0.0f) {
    return static_cast<int32_t>(std::max_element(logits.begin(), logits.end()) - logits.begin());
  }
  // Candidates by descending logit (ties: lower id first), cut to top-k.
  order_.resize(static_cast<size_t>(vocab));
  std::iota(order_.begin(), order_.end(), 0);
  const int64_t k = options_.top_k > 0 ? std::min(options_.top_k, vocab) : vocab;
  auto better = [&](int32_t a, int32_t b) { return logits[a] > logits[b] || (logits[a] == logits[b] && a < b); };
  std::partial_sort(order_.begin(), order_.begin() + k, order_.end(), better);
  order_.resize(static_cast<size_t>(k));
  // Softmax of logits / temperature in double.
  const double top = logits[order_[0]];
  weights_.resize(order_.size());
  double total = 0.0;
  for (size_t i = 0; i < order_.size(); ++i) {
    weights_[i] = std::exp((static_cast<double>(logits[order_[i]]) - top) / options_.temperature);
    total += weights_[i];
  }
  // Top-p: keep the most likely tokens until their mass reaches p (at least one).
  size_t kept = order_.size();
  if (options_.top_p < 1.0f) {
    double mass = 0.0;
    for (size_t i = 0; i < order_.size(); ++i) {
      mass += weights_[i] / total;
      if (mass >= options_.top_p) {
        kept = i + 1;
        break;
      }
    }
    total = std::accumulate(weights_.begin(), weights_.begin() + static_cast<int64_t>(kept), 0.0);
  }
  // One uniform draw in [0, 1) from (seed, sequence, step).
  const PhiloxBlock block = philox4x32_10(philox_key(options_.seed, "generate"), static_cast<uint64_t>(sequence),
                                          static_cast<uint64_t>(step));
  const uint64_t bits = (static_cast<uint64_t>(block[0]) << 21) ^ block[1];  // 53 bits
  const double u = static_cast<double>(bits & ((uint64_t{1} << 53) - 1)) * 0x1p-53 * total;
  double cumulative = 0.0;
  for (size_t i = 0; i < kept; ++i) {
    cumulative += weights_[i];
    if (u < cumulative) return order_[i];
  }
  return order_[kept - 1];
}

}  // namespace gpt
