// Megatron's GPTDataset (megatron/core/datasets/gpt_dataset.py): fixed-length samples of
// seq_length + 1 tokens cut across document boundaries from a range of a corpus's documents.
// The three indices are Megatron's, value for value and dtype for dtype
// (_build_document_sample_shuffle_indices; the same in core_v0.8.0 and current Megatron but for
// the sample index's dtype, always int64 before core 0.10):
//
//   document index  int32: the range's documents repeated for as many epochs as the requested
//                   samples need (one epoch when no count is given), shuffled; a final epoch used
//                   for less than 80% of its samples is shuffled on its own, after the others
//   sample index    [samples + 1, 2]: (position in the document index, offset) where each sample
//                   starts; sample i runs to the start of sample i + 1, plus one token
//                   (helpers.cpp build_sample_idx); int32 when the document index's length and
//                   the corpus's longest document fit in int32, else int64
//   shuffle index   a permutation of the samples, the final epoch's kept apart as above; uint32,
//                   or int64 from 2^32 - 2 samples on
//
// Both shuffles draw from one numpy RandomState(seed) per dataset, in that order
// (numpy_random_state.h), so the same seed, corpus, split and sample count give Megatron's order.
//
// The indices are cached under --data-cache-path as Megatron caches them:
// <md5>-GPTDataset-<split>-{description.txt,document_index.npy,sample_index.npy,shuffle_index.npy},
// the md5 being that of Megatron's description (megatron_description.h), so either program finds
// the other's files. A fifth file, <md5>-GPTDataset-<split>-corpus_key.txt, ties them to the
// corpus's content (for indexed datasets the size and checksum of the .idx, which holds every
// document length) and to the document range: a rewritten dataset at the same path, or a set
// without that key (written by Megatron, or interrupted), is rebuilt, never trusted. Loaded
// indices are also range-checked, and rebuilt if damaged.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "data/dataset_split.h"
#include "data/document_store.h"
#include "data/megatron_description.h"
#include "data/sample_source.h"

namespace gpt {

struct GptDatasetConfig {
  uint64_t seed = 1234;                 // numpy's RandomState takes 0 .. 2^32 - 1
  int64_t seq_length = 0;
  std::optional<int64_t> num_samples;   // samples the run will read; none: one epoch (Megatron's None)
  DocumentRange documents;              // documents of the corpus this split uses
  std::string split_name;               // "train", "valid", "test": for messages and cache file names
  std::string cache_dir;                // empty: no caching
  // The rest of Megatron's description, which names the cache files.
  std::string dataset_path;             // the --data-path prefix as given
  std::string split;                    // --split as given
  TokenizerIdentity tokenizer;
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
  const std::vector<int64_t>& shuffle_index() const { return shuffle_index_; }
  // The cache files' common start, <cache_dir>/<md5>-GPTDataset-<split>; empty without a cache.
  const std::string& cache_base() const { return cache_base_; }
  // Megatron's description of this dataset (description.txt in the cache).
  std::string megatron_description() const;

 private:
  GptDataset(std::shared_ptr<const DocumentStore> store, const GptDatasetConfig& config)
      : store_(std::move(store)), config_(config) {}
  void build_indices();
  absl::Status load_or_build();
  absl::Status load_cached(const std::string& description);
  absl::Status write_cache(const std::string& description);
  // Indices read from the cache must describe this range and seq_length exactly.
  absl::Status check_loaded_indices() const;
  // What the Megatron description leaves out: the corpus's content and the document range.
  std::string corpus_key() const;

  std::shared_ptr<const DocumentStore> store_;
  GptDatasetConfig config_;
  int64_t num_epochs_ = 0;
  bool loaded_from_cache_ = false;
  // helpers.py build_sample_idx: an int32 sample index when the document index's length and the
  // longest document of the whole corpus (not only this split's) fit in int32.
  bool sample_index_fits_int32(int64_t document_index_size) const;

  int64_t longest_document_ = 0;
  bool sample_index_int32_ = true;   // Megatron's dtype choices for the cached arrays
  bool shuffle_index_uint32_ = true;
  std::string cache_base_;
  std::vector<int32_t> document_index_;
  std::vector<int64_t> sample_index_;  // [samples + 1] x 2, flattened
  std::vector<int64_t> shuffle_index_;
};

}  // namespace gpt
