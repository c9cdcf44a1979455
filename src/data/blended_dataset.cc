#include "data/blended_dataset.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace gpt {

absl::StatusOr<std::vector<double>> normalize_blend_weights(const std::vector<double>& weights,
                                                            const std::vector<std::string>& names) {
  GPT_CHECK(!weights.empty() && weights.size() == names.size());
  double largest = 0.0;
  for (size_t i = 0; i < weights.size(); ++i) {
    if (!std::isfinite(weights[i]) || !(weights[i] > 0.0)) {
      return absl::InvalidArgumentError(absl::StrCat("--data-path: the weight of ", names[i], " is ", weights[i],
                                                     "; blend weights must be finite positive numbers"));
    }
    largest = std::max(largest, weights[i]);
  }
  std::vector<double> normalized(weights.size());
  double total = 0.0;
  for (size_t i = 0; i < weights.size(); ++i) total += normalized[i] = weights[i] / largest;  // in (0, 1]
  for (size_t i = 0; i < weights.size(); ++i) {
    normalized[i] /= total;
    if (!(normalized[i] > 0.0)) {
      return absl::InvalidArgumentError(absl::StrCat("--data-path: the weight of ", names[i], " (", weights[i],
                                                     ") is too small next to the largest (", largest,
                                                     ") to give it any share of the blend"));
    }
  }
  return normalized;
}

int64_t samples_needed(double weight, int64_t total) {
  return static_cast<int64_t>(std::ceil(std::ceil(static_cast<double>(total) * weight) * 1.005));
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const SampleSource>> datasets, std::vector<double> weights,
                               int64_t size)
    : datasets_(std::move(datasets)) {
  GPT_CHECK(!datasets_.empty() && datasets_.size() == weights.size() && datasets_.size() < 32768);
  // normalize_blend_weights gives such weights; anything else would pick from a dataset forever
  // (inf) or never (nan), then read past its samples.
  double total = 0.0;
  for (double w : weights) {
    GPT_CHECK(std::isfinite(w) && w > 0.0) << "blend weight " << w;
    total += w;
  }
  GPT_CHECK(std::abs(total - 1.0) < 1e-6) << "blend weights sum to " << total;
  dataset_index_.resize(static_cast<size_t>(size));
  dataset_sample_index_.resize(static_cast<size_t>(size));
  std::vector<int64_t> taken(datasets_.size(), 0);
  for (int64_t i = 0; i < size; ++i) {
    const double position = std::max(static_cast<double>(i), 1.0);
    size_t best = 0;
    double best_error = weights[0] * position - static_cast<double>(taken[0]);
    for (size_t d = 1; d < datasets_.size(); ++d) {
      const double error = weights[d] * position - static_cast<double>(taken[d]);
      if (error > best_error) {
        best_error = error;
        best = d;
      }
    }
    dataset_index_[static_cast<size_t>(i)] = static_cast<int16_t>(best);
    dataset_sample_index_[static_cast<size_t>(i)] = taken[best]++;
  }
}

void BlendedDataset::sample(int64_t index, std::span<int32_t> tokens) const {
  GPT_CHECK(index >= 0 && index < size()) << "blended sample " << index << " of " << size();
  datasets_[static_cast<size_t>(dataset_index_[static_cast<size_t>(index)])]->sample(
      dataset_sample_index_[static_cast<size_t>(index)], tokens);
}

}  // namespace gpt
