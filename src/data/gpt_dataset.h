// Megatron's GPTDataset (megatron/core/datasets/gpt_dataset.py): fixed-length samples of
// seq_length + 1 tokens cut across document boundaries from a range of a corpus's documents.
//
//   document index  the range's documents repeated for as many epochs as the requested samples
//                   need, shuffled (the last epoch separately when it is used for less than 80%)
//   sample index    [samples + 1, 2]: (position in the document index, offset) where each sample
//                   starts; sample i runs to the start of sample i + 1, plus one token
//   shuffle index   a permutation of the samples (again with the final epoch kept apart)
//
// The indices depend only on the corpus, the range, seq_length, the seed and the sample count;
// they are cached under --data-cache-path and reused when that description matches. The corpus is
// described by its content (for indexed datasets the size and checksum of the .idx, which holds
// every document length), so a rewritten dataset at the same path never reuses stale indices;
// loaded indices are range-checked and rebuilt if damaged. Shuffles use
// the project's counter-based RNG, so the order is deterministic but not numpy's.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/dataset_split.h"
#include "data/document_store.h"
#include "data/sample_source.h"

namespace gpt {

struct GptDatasetConfig {
  uint64_t seed = 1234;
  int64_t seq_length = 0;
  int64_t num_samples = 0;   // samples the run will read from this dataset
  DocumentRange documents;   // documents of the corpus this split uses
  std::string split_name;    // "train", "valid", "test": for messages and cache file names
  std::string cache_dir;     // empty: no caching
};

class GptDataset final : public SampleSource {
 public:
  static absl::StatusOr<std::unique_ptr<GptDataset>> build(std::shared_ptr<const DocumentStore> store,
                                                           const GptDatasetConfig& config);

  int64_t seq_length() const override { return config_.seq_length; }
  void sample(int64_t index, std::span<int32_t> tokens) const override;
  int64_t size() const { return static_cast<int64_t>(shuffle_index_.size()); }
  int64_t num_epochs() const { return num_epochs_; }
  bool loaded_from_cache() const { return loaded_from_cache_; }
  const std::vector<int32_t>& document_index() const { return document_index_; }

 private:
  GptDataset(std::shared_ptr<const DocumentStore> store, const GptDatasetConfig& config)
      : store_(std::move(store)), config_(config) {}
  void build_indices();
  absl::Status load_or_build();
  // Indices read from the cache must describe this range and seq_length exactly.
  absl::Status check_loaded_indices() const;
  std::string description() const;

  std::shared_ptr<const DocumentStore> store_;
  GptDatasetConfig config_;
  int64_t num_epochs_ = 0;
  bool loaded_from_cache_ = false;
  std::vector<int32_t> document_index_;
  std::vector<int64_t> sample_index_;  // [samples + 1] x 2, flattened
  std::vector<int64_t> shuffle_index_;
};

}  // namespace gpt
