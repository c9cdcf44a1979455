// The parameters one rank holds: its tensor-parallel slice of each parameter of its pipeline
// stage, in one contiguous buffer of the compute dtype, with FP32 gradients ("main_grad") in a
// second contiguous buffer of the same layout. Contiguity is what data-parallel buckets, the
// distributed optimizer and checkpoint shards are cut from. Parameters are laid out in reverse
// order of first use, so that gradients become final front to back during backward.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "checkpoint/sharded_tensor.h"
#include "core/arena.h"
#include "core/context.h"
#include "model/param_registry.h"
#include "parallel/data_parallel/range.h"

namespace gpt {

// Consecutive rows of a slice that are consecutive in the global tensor too.
struct RowBlock {
  int64_t local_row = 0;
  int64_t global_row = 0;
  int64_t rows = 0;
};

struct Param {
  const ParamSpec* spec = nullptr;
  Shape local_shape;          // this rank's slice
  int64_t row_offset = 0;     // slice position in the global tensor
  int64_t column_offset = 0;
  // TensorSplit::kGatedRows: the slice's rows are two halves of this many rows each, the first at
  // global row row_offset, the second at global_rows / 2 + row_offset. 0 for the other splits.
  int64_t gated_half_rows = 0;
  int64_t flat_offset = 0;    // position in the store's flat buffers (elements)
  Tensor value;               // compute dtype
  Tensor grad;                // float32, accumulated over microbatches
  // Tensor-parallel duplicates (replicated parameters on TP ranks other than 0) are left out of the
  // global gradient norm so that each parameter counts once.
  bool counts_in_grad_norm = true;

  const std::string& name() const { return spec->name; }
  int64_t numel() const { return local_shape.numel(); }
  // The global row of local row r (column_offset gives the column).
  int64_t global_row(int64_t local_row) const;
  // The slice as runs of rows contiguous in the global tensor: one, or two for kGatedRows.
  std::vector<RowBlock> row_blocks() const;
};

// How the flat buffers are cut into buckets for data-parallel reduction (Megatron's
// param-and-grad buffer): parameters in reverse order of first use, each starting on a multiple of
// 64 elements; a bucket closes once it holds at least `bucket_size` elements (0: one bucket); a
// parameter named in `own_bucket` (the tied word embedding between pipeline stages) gets a bucket
// of its own; with `shard_over` > 1 (the distributed optimizer) every bucket is padded to a multiple
// of lcm(shard_over, 128) elements, Megatron's rule, so that it splits evenly over the
// data-parallel ranks.
struct BucketLayout {
  int64_t bucket_size = 0;
  int shard_over = 1;
  std::vector<std::string> own_bucket;
};

struct Bucket {
  Range range;                 // elements of the flat buffers, padding included
  std::vector<size_t> params;  // indices into ParamStore::params()
};

class ParamStore {
 public:
  // `specs` are the parameters of this rank's pipeline stage(s).
  ParamStore(std::vector<ParamSpec> specs, int tensor_parallel_rank, int tensor_parallel_size, DType dtype,
             Arena& arena, const BucketLayout& buckets = {});
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  // Fatal if absent: layers ask only for parameters their stage owns.
  Param& get(const std::string& name);
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }

  DType dtype() const { return dtype_; }
  // All values / all gradients as 1-D tensors (including alignment padding, which stays zero).
  const Tensor& flat_values() const { return flat_values_; }
  const Tensor& flat_grads() const { return flat_grads_; }

  // Fills every slice from (seed, global name, global index): the same global model for any layout.
  void initialize(uint64_t seed);
  void zero_grads(Context& ctx) const;

  // The buckets, in the order their gradients become final in backward (front to back).
  const std::vector<Bucket>& buckets() const { return buckets_; }
  // Every parameter slice as a checkpoint piece "model/<name>" (views of the values). Duplicates
  // this rank holds (a replicated parameter on TP rank > 0, the last stage's tied embedding copy:
  // whatever does not count in the gradient norm) have replica_id 1.
  std::vector<ShardedTensor> sharded_tensors() const;
  // The param holding flat element `flat_index`, or nullptr for alignment padding.
  const Param* param_at(int64_t flat_index) const;

  // The parameter's element range in the flat buffers.
  Range range_of(const Param& param) const { return {param.flat_offset, param.flat_offset + param.numel()}; }

 private:
  std::vector<ParamSpec> specs_;
  std::vector<Param> params_;
  std::unordered_map<std::string, size_t> index_;
  DType dtype_;
  Tensor flat_values_;
  Tensor flat_grads_;
  std::vector<Bucket> buckets_;
};

// The local slice of a parameter for a TP rank: shape and offsets in the global tensor.
struct SliceLayout {
  Shape local_shape;
  int64_t row_offset = 0;
  int64_t column_offset = 0;
  int64_t gated_half_rows = 0;  // see Param
};
SliceLayout slice_layout(const ParamSpec& spec, int tensor_parallel_rank, int tensor_parallel_size);

}  // namespace gpt
