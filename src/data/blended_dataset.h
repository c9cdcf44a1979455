// Megatron's BlendedDataset: samples drawn from several datasets in proportion to their weights.
// Sample i comes from the dataset whose share is furthest behind its weight at i
// (helpers.cpp build_blending_indices), so after n samples every dataset's count is within one
// of weight * n.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/sample_source.h"

namespace gpt {

class BlendedDataset final : public SampleSource {
 public:
  // `weights` are normalized; each dataset must hold at least the samples the blend asks of it
  // (samples_needed).
  BlendedDataset(std::vector<std::shared_ptr<const SampleSource>> datasets, std::vector<double> weights, int64_t size);

  int64_t seq_length() const override { return datasets_.front()->seq_length(); }
  void sample(int64_t index, std::span<int32_t> tokens) const override;
  int64_t size() const { return static_cast<int64_t>(dataset_index_.size()); }
  int dataset_of(int64_t index) const { return dataset_index_[static_cast<size_t>(index)]; }

 private:
  std::vector<std::shared_ptr<const SampleSource>> datasets_;
  std::vector<int16_t> dataset_index_;
  std::vector<int64_t> dataset_sample_index_;
};

// The weights of a blend, normalized to sum to 1. Each must be a finite positive number: `inf`, `nan`,
// zero or a negative weight is refused, naming `names[i]` (the dataset it weighs). Very large
// finite weights (1e308 each) are scaled by the largest before summing, so the sum cannot overflow.
absl::StatusOr<std::vector<double>> normalize_blend_weights(const std::vector<double>& weights,
                                                            const std::vector<std::string>& names);

// Megatron's sample budget of a dataset of weight w in a blend of `total` samples:
// ceil(ceil(total * w) * 1.005).
int64_t samples_needed(double weight, int64_t total);

}  // namespace gpt
