// --split "949,50,1": Megatron's train/valid/test division of a corpus's documents into contiguous
// ranges (megatron/core/datasets/utils.py get_split_indices: weights normalized, each boundary
// rounded, the rounding drift taken off the later boundaries).
#pragma once

#include <array>
#include <cstdint>
#include <string>

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
std::array<DocumentRange, 3> split_documents(const std::array<double, 3>& weights, int64_t num_documents);

}  // namespace gpt
