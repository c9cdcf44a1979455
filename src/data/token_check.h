// Token ids checked against the vocabulary when a dataset is opened. Checked only when a microbatch
// is drawn, one id outside the vocabulary passes a short run and aborts a long one hours later;
// checked here, it stops the run before anything is allocated, naming the file, the document, the
// position and the id. One pass over the memory-mapped .bin, split over threads (and, in training,
// over the ranks of a node, which open the same files); its cost per GB is in docs/PERFORMANCE.md.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "data/indexed_dataset.h"

namespace gpt {

struct TokenCheckOptions {
  int64_t vocab_size = 0;  // ids must lie in [0, vocab_size)
  int threads = 1;
  // This caller checks slice `part` of `parts` equal slices of the tokens. Ranks that share the
  // work must agree on the outcome afterwards (train/rank_agreement.h).
  int part = 0;
  int parts = 1;
};

// Every dtype is checked as stored: an int64 id beyond the vocabulary (or beyond 32 bits) is
// refused, never truncated; a negative id in a signed dtype is refused.
absl::Status check_token_ids(const IndexedDataset& dataset, const TokenCheckOptions& options);

}  // namespace gpt
