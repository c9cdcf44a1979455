// One tensor-parallel rank's part of the model for generation: the same split as training
// (model/param_registry.h's TensorSplit), so that any checkpoint, saved under any layout, loads
// into the slice of any TP size that divides the model's key/value groups and FFN width.
//
//   column-parallel (kRows):  linear_qkv [qkv / tp, h] (whole groups: GQA caches only the local
//                             groups), linear_fc1 [ffn / tp, h]; SwiGLU (kGatedRows) [gate_r; up_r]
//   row-parallel (kColumns):  linear_proj [h, heads d / tp], linear_fc2 [h, ffn / tp]
//   vocabulary-parallel:      word embedding / output layer [ceil(padded / tp), h], rows past the
//                             checkpoint's padded vocabulary zero
//   replicated:               norms, position table, row-parallel biases
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "model/param_registry.h"

namespace gpt {

struct TensorSlice {
  int rank = 0;
  int size = 1;
};

// Rows of a vocabulary-parallel table on each rank.
int64_t vocab_rows_per_rank(int64_t padded_vocab, int tensor_parallel);

// OK when `tensor_parallel` ranks can split this model (query heads and key/value groups whole on
// a rank, the FFN evenly); otherwise the reason, naming --tensor-model-parallel-size.
absl::Status check_tensor_parallel(const ModelConfig& config, int tensor_parallel);

// The slice of one parameter: its local shape and the global boxes it is read from, each placed
// at `local_offset` elements into the local buffer (row-major). Local elements no box covers are
// zero (vocabulary padding rows).
struct SliceBox {
  std::vector<int64_t> offsets, shape;
  int64_t local_offset = 0;
};
struct ParamSlice {
  std::vector<int64_t> local_shape;
  std::vector<SliceBox> boxes;
  int64_t local_numel() const;
};
ParamSlice param_slice(const ParamSpec& spec, const ModelConfig& config, TensorSlice slice);

}  // namespace gpt
