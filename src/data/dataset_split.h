// --split "949,50,1": Megatron's train/valid/test division of a corpus's documents into contiguous
// ranges, as megatron/core/datasets does it (blended_megatron_dataset_config.py
// parse_and_normalize_split and convert_split_vector_to_split_matrix, then
// blended_megatron_dataset_builder.py _build_megatron_dataset_splits; the same in core_v0.8.0 and
// current Megatron): the weights are normalized, their running sums 0, w0, w0 + w1, w0 + w1 + w2
// are the book-ends, and split i is documents [round(start * n), round(end * n)) with Python's
// round (half to even) of the double product. A split of weight zero has no book-ends and no
// documents. (The legacy rule, megatron/legacy/data/dataset_utils.py get_train_valid_test_split_,
// rounds each width and moves the drift onto later boundaries: on 49 documents with 969,30,1 it
// gives training documents 0-47, Megatron's GPT dataset 0-46.)
#pragma once

#include <array>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>

#include "core/status.h"

namespace gpt {

enum class Split { kTrain = 0, kValid = 1, kTest = 2 };

struct DocumentRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
};

// "949,50,1" (or "98,2,0", or "1") -> normalized weights; three entries, missing ones zero.
absl::StatusOr<std::array<double, 3>> parse_split(const std::string& text);
// Megatron's split matrix: each split's (start, end) fraction of the corpus, or none for a split of
// weight zero.
using SplitMatrix = std::array<std::optional<std::pair<double, double>>, 3>;
SplitMatrix split_matrix(const std::array<double, 3>& weights);
// Empty ranges for the splits without book-ends.
std::array<DocumentRange, 3> split_documents(const std::array<double, 3>& weights, int64_t num_documents);

}  // namespace gpt
