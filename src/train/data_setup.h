// The train, validation and test sample sources a run reads, built from the data flags. Sizes
// follow Megatron's train_valid_test_num_samples: train = iters x gbs, valid = (iters / eval
// interval + 1) x eval iters x gbs, test = eval iters x gbs.
#pragma once

#include <array>
#include <memory>

#include "data/sample_source.h"
#include "train/args/arguments.h"

namespace gpt {

struct DataSources {
  // valid/test are null when not evaluated (--eval-iters 0) or when --split gives them no documents.
  std::shared_ptr<const SampleSource> train, valid, test;
  int64_t vocab_size = 0;  // the tokenizer's (unpadded) vocabulary
};

std::array<int64_t, 3> samples_per_split(const Arguments& args);
// Opens and validates every dataset up front (headers, sizes, every token id against the
// tokenizer's vocabulary) and builds or loads the indices. Collective over the world: every rank
// calls it, and an error on any rank fails it on every rank (agree_on_setup), the failing rank
// with its own message.
absl::StatusOr<DataSources> build_data_sources(const Arguments& args);

}  // namespace gpt
