// The parameters one rank holds: its tensor-parallel slice of each parameter of its pipeline
// stage, in one contiguous buffer of the compute dtype, with FP32 gradients ("main_grad") in a
// second contiguous buffer of the same layout. Contiguity is what data-parallel buckets, the
// distributed optimizer and checkpoint shards are cut from. Where each parameter sits is the shard
// plan's decision (model/shard_plan.h): reverse order of first use, so that gradients become final
// front to back during backward, in buckets for data-parallel reduction.
#pragma once

#include <string>
#include <unordered_map>
#include <vector>

#include "checkpoint/sharded_tensor.h"
#include "core/arena.h"
#include "core/context.h"
#include "model/param_registry.h"
#include "model/shard_plan.h"
#include "parallel/data_parallel/range.h"

namespace gpt {

struct Param {
  const ParamSpec* spec = nullptr;
  const ParamPlacement* placement = nullptr;  // in the store's shard plan
  // Copied from the placement for the layers' convenience.
  Shape local_shape;          // this rank's slice
  int64_t row_offset = 0;     // slice position in the global tensor
  int64_t column_offset = 0;
  int64_t flat_offset = 0;    // position in the store's flat buffers (elements)
  DType dtype = DType::kFloat32;  // of `value` (the store's compute dtype), also while it is empty
  // Compute dtype. Under ZeRO-3 (ShardPlan::sharded_parameters) a view of its bucket's gathered
  // working buffer while a unit uses it (ParamStore::set_bucket_values), else empty.
  Tensor value;
  // float32, accumulated over microbatches. Under ZeRO-2 (ShardPlan::sharded_gradients) a view of
  // its bucket's working buffer while the bucket is held (ParamStore::set_bucket_grads), else empty.
  Tensor grad;
  // Tensor-parallel duplicates (replicated parameters on TP ranks other than 0) are left out of the
  // global gradient norm so that each parameter counts once.
  bool counts_in_grad_norm = true;

  const std::string& name() const { return spec->name; }
  int64_t numel() const { return local_shape.numel(); }
  // The global row of local row r (column_offset gives the column).
  int64_t global_row(int64_t local_row) const { return placement->global_row(local_row); }
  // The slice as runs of rows contiguous in the global tensor: one, or two for kGatedRows.
  std::vector<RowBlock> row_blocks() const { return placement->row_blocks(); }
};

class ParamStore {
 public:
  // The flat buffers laid out as `plan` says (model/shard_plan.h), for the parameters of this
  // rank's pipeline stage(s).
  ParamStore(ShardPlan plan, DType dtype, Arena& arena);
  // What the store takes from its arena: the flat values in `dtype` (this rank's shards of them
  // with ZeRO-3) and the FP32 gradients (this rank's shards of them with ZeRO-2 and ZeRO-3).
  static int64_t bytes(const ShardPlan& plan, DType dtype);
  // One data-parallel rank, one bucket: `specs` sliced for this TP rank.
  ParamStore(std::vector<ParamSpec> specs, int tensor_parallel_rank, int tensor_parallel_size, DType dtype,
             Arena& arena);
  ParamStore(const ParamStore&) = delete;
  ParamStore& operator=(const ParamStore&) = delete;

  // Fatal if absent: layers ask only for parameters their stage owns.
  Param& get(const std::string& name);
  bool contains(const std::string& name) const { return index_.count(name) > 0; }
  std::vector<Param>& params() { return params_; }
  const std::vector<Param>& params() const { return params_; }

  DType dtype() const { return dtype_; }
  // All values / all gradients as 1-D tensors (including alignment padding, which stays zero).
  // Not with sharded values (ZeRO-3) / sharded gradients (ZeRO-2 and 3), where only the shards
  // exist (values_in, grads_in).
  const Tensor& flat_values() const;
  const Tensor& flat_grads() const;
  // The values of the flat elements `flat`: a view of the flat values, or with sharded values of
  // the shard holding them (fatal unless `flat` lies in one of this rank's shards).
  Tensor values_in(Range flat) const;
  // What holds the values: the flat buffer, or this rank's shards of every bucket one after another
  // (ZeRO-3).
  const Tensor& value_storage() const { return value_storage_; }
  bool sharded_parameters() const { return plan_.sharded_parameters(); }
  // ZeRO-3: points the values of bucket b's parameters into `buffer` (the bucket's gathered
  // elements, [bucket size]), or with an empty tensor, detaches them.
  void set_bucket_values(int bucket, const Tensor& buffer);
  // The gradients of the flat elements `flat`: a view of the flat gradients, or with sharded
  // gradients of the shard holding them (fatal unless `flat` lies in one of this rank's shards).
  Tensor grads_in(Range flat) const;
  // What holds the gradients: the flat buffer, or this rank's shards of every bucket one after
  // another (ZeRO-2).
  const Tensor& gradient_storage() const { return grad_storage_; }
  bool sharded_gradients() const { return plan_.sharded_gradients(); }
  // ZeRO-2: points the gradients of bucket b's parameters into `buffer` (the bucket's elements,
  // [bucket size]), or with an empty tensor, detaches them.
  void set_bucket_grads(int bucket, const Tensor& buffer);

  // Fills every slice from (seed, global name, global index): the same global model for any layout.
  void initialize(uint64_t seed);
  void zero_grads(Context& ctx) const;

  const ShardPlan& plan() const { return plan_; }
  // The buckets, in the order their gradients become final in backward (front to back).
  const std::vector<BucketPlan>& buckets() const { return plan_.buckets(); }
  // Every parameter slice as a checkpoint piece "model/<name>" (views of the values); under ZeRO-3
  // the parts of them in this rank's shards, as rectangles of the global tensors. Duplicates
  // this rank holds (a replicated parameter on TP rank > 0, the last stage's tied embedding copy:
  // whatever does not count in the gradient norm) have replica_id 1.
  std::vector<ShardedTensor> sharded_tensors() const;
  // The param holding flat element `flat_index`, or nullptr for alignment padding.
  const Param* param_at(int64_t flat_index) const;

  // The parameter's element range in the flat buffers.
  Range range_of(const Param& param) const { return {param.flat_offset, param.flat_offset + param.numel()}; }

 private:
  ShardPlan plan_;
  std::vector<Param> params_;  // in the plan's (flat) order
  std::unordered_map<std::string, size_t> index_;
  // The part of `storage` (laid out as this rank's shards one after another) holding `flat`.
  Tensor shard_view(const Tensor& storage, Range flat, const char* what) const;
  // Points the `field` views of bucket b's parameters into `buffer`, or detaches them.
  void point_bucket(int bucket, const Tensor& buffer, Tensor Param::*field);
  // ZeRO-3 initialisation: param's values computed whole on the host ([numel] in the dtype's
  // bits), the parts in this rank's shards copied in.
  void write_owned_parts(const Param& param, const void* host_values);

  DType dtype_;
  Tensor value_storage_;                // [flat elements], or [sum of this rank's shards] with ZeRO-3
  Tensor grad_storage_;                 // [flat elements], or [sum of this rank's shards] with ZeRO-2/3
  std::vector<BucketShard> bucket_shards_;  // plan_.bucket_shards(), kept: grads_in / values_in run every step
  std::vector<int64_t> shard_offsets_;  // [bucket] the shard's first element in the shard storages
};

}  // namespace gpt
