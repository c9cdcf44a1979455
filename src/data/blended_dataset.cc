#include "data/blended_dataset.h"

#include <algorithm>
#include <cmath>

#include "core/check.h"

namespace gpt {

int64_t samples_needed(double weight, int64_t total) {
  return static_cast<int64_t>(std::ceil(std::ceil(static_cast<double>(total) * weight) * 1.005));
}

BlendedDataset::BlendedDataset(std::vector<std::shared_ptr<const SampleSource>> datasets, std::vector<double> weights,
                               int64_t size)
    : datasets_(std::move(datasets)) {
  GPT_CHECK(!datasets_.empty() && datasets_.size() == weights.size() && datasets_.size() < 32768);
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
