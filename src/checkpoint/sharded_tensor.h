// One rank's piece of a global tensor, as checkpoints store and load it (Megatron-Core's
// ShardedTensor idea): the global tensor's name and shape, where the piece sits in it, and the
// memory that holds the piece. The parameter store emits one per parameter slice, the optimizer one
// or more per parameter for its master weights and moments (a ZeRO shard covers a flat range of a
// slice, which is up to three rectangles: see rectangles_of_flat_range). Because every piece is
// placed by global offsets, a checkpoint saved under one layout loads under any other.
//
// Keys: "model/<parameter>", "optimizer/master/<parameter>", "optimizer/exp_avg/<parameter>",
// "optimizer/exp_avg_sq/<parameter>", and "model/<buffer>" for the model's persistent tensors that
// are not parameters (model/param_registry.h's model_buffer_names: the MoE expert bias).
#pragma once

#include <algorithm>
#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"

namespace gpt {

struct ShardedTensor {
  std::string key;
  std::vector<int64_t> global_shape;  // rank 1 or 2
  std::vector<int64_t> offsets;       // of this piece in the global tensor, one per dimension
  std::vector<int64_t> local_shape;   // of this piece
  // 0: this rank writes the piece. > 0: another rank holds an identical copy and writes it
  // (tensor-parallel duplicates of replicated parameters, data-parallel replicas, the last pipeline
  // stage's copy of the tied embedding).
  int64_t replica_id = 0;
  // Set when every data-parallel rank holds this piece (parameters; optimizer state without the
  // distributed optimizer): the saver then spreads these pieces over the data-parallel ranks.
  bool replicated_over_data_parallel = false;
  // A routed expert's piece laid out apart from the dense parameters (model/shard_plan.h's expert
  // domain): its replicas are the expert data-parallel group's ranks instead of data x context's.
  bool expert_data_parallel = false;
  // The piece's elements, row-major in local_shape, contiguous: a view into the rank's buffers (on
  // the device or the host); its dtype is the stored dtype.
  Tensor data;

  int64_t numel() const {
    int64_t n = 1;
    for (int64_t d : local_shape) n *= d;
    return n;
  }
};

// A rectangle of a row-major tensor: offsets and counts per dimension, and where its elements start
// in the flattened tensor (they are contiguous there, see below).
struct FlatRectangle {
  std::vector<int64_t> offsets;
  std::vector<int64_t> counts;
  int64_t flat_begin = 0;
};

// Cuts the elements [begin, end) of a row-major tensor of `shape` (rank 1 or 2) into rectangles
// whose elements are contiguous in the flattened tensor: for rank 2 the tail of the first row, the
// whole rows in between, the head of the last row (empty ones left out).
inline std::vector<FlatRectangle> rectangles_of_flat_range(const std::vector<int64_t>& shape, int64_t begin,
                                                           int64_t end) {
  std::vector<FlatRectangle> result;
  if (end <= begin) return result;
  if (shape.size() == 1) return {{{begin}, {end - begin}, begin}};
  const int64_t columns = shape[1];
  int64_t row = begin / columns, column = begin % columns;
  if (column != 0) {
    const int64_t count = std::min(columns - column, end - begin);
    result.push_back({{row, column}, {1, count}, begin});
    begin += count;
    ++row;
  }
  const int64_t whole_rows = (end - begin) / columns;
  if (whole_rows > 0) {
    result.push_back({{row, 0}, {whole_rows, columns}, begin});
    begin += whole_rows * columns;
    row += whole_rows;
  }
  if (end > begin) result.push_back({{row, 0}, {1, end - begin}, begin});
  return result;
}

}  // namespace gpt
