// Where every element of this rank's parameters lives, decided once (Megatron's param-and-grad
// buffer and the distributed optimizer's ranges, in one value): the TP slice of each parameter,
// its place in the flat value and gradient buffers, the buckets the flat buffers are cut into for
// data-parallel reduction (padding included), which data-parallel rank owns which part of each
// bucket, and how any flat range maps back to rectangles of the global tensors. ParamStore lays
// out its buffers from it, GradientSync and ParamGather take its bucket shards, AdamW its owned
// ranges, checkpoints its global rectangles; a new sharding strategy is a new plan, not edits in
// five places.
//
// The rules (Megatron's):
// - parameters in reverse order of first use, each starting on a multiple of 64 elements (16-byte
//   vector access in either dtype; a clean cut for buckets and shards);
// - a bucket closes once it holds at least `bucket_size` elements (0: one bucket) or 2^30 (MPI
//   counts are ints); a parameter named in `own_bucket` (the tied word embedding between pipeline
//   stages) gets a bucket of its own;
// - with the distributed optimizer every bucket is padded to a multiple of lcm(DP, 128) elements
//   and data-parallel rank r owns the r-th of DP equal parts of each; otherwise every rank owns
//   every element.
// - under expert parallelism (EP-DESIGN.md) the routed experts' parameters (ParamSpec::expert) are
//   sliced over the expert tensor-parallel group; when their expert data-parallel group is not the
//   dense data x context group they form their own domain (Megatron's expert-parallel buffers): laid
//   out after every dense parameter, in buckets of their own, padded to lcm(EDP, 128) and sharded
//   over EDP. With EP = 1 and ETP = TP nothing of this changes the plan.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/tensor.h"
#include "model/param_registry.h"
#include "parallel/data_parallel/range.h"

namespace gpt {

// The local slice of a parameter for a TP rank: shape and offsets in the global tensor.
struct SliceLayout {
  Shape local_shape;
  int64_t row_offset = 0;
  int64_t column_offset = 0;
  // TensorSplit::kGatedRows: the slice's rows are two halves of this many rows each, the first at
  // global row row_offset, the second at global_rows / 2 + row_offset. 0 for the other splits.
  int64_t gated_half_rows = 0;
};
SliceLayout slice_layout(const ParamSpec& spec, int tensor_parallel_rank, int tensor_parallel_size);

// The unit a parameter belongs to, as the model groups its parameters (model/param_observer.h):
// "layer N", "output" (final norm, untied output layer) or "embedding" (word and position
// embeddings; the tied word embedding is the embedding's, though the output group uses it too).
std::string param_unit(const std::string& name);

// Consecutive rows of a slice that are consecutive in the global tensor too.
struct RowBlock {
  int64_t local_row = 0;
  int64_t global_row = 0;
  int64_t rows = 0;
};

// A rectangle of a parameter's global tensor and where its elements sit in the flat buffers
// (contiguously: see checkpoint/sharded_tensor.h's rectangles_of_flat_range).
struct GlobalRectangle {
  std::vector<int64_t> offsets;  // in the global tensor
  std::vector<int64_t> counts;
  int64_t flat_begin = 0;        // in the flat buffers
  int64_t numel() const;
};

// Which group a bucket is reduced and sharded over: the dense data x context group (or the
// optimizer instance), or the expert data-parallel group (expert parameters kept apart).
enum class ParamDomain { kDense, kExpert };

// A data-parallel group's size and this rank's place in it.
struct DomainGroup {
  int rank = 0;
  int size = 1;
};

struct ParamPlacement {
  const ParamSpec* spec = nullptr;
  ParamDomain domain = ParamDomain::kDense;
  SliceLayout slice;
  int64_t flat_offset = 0;  // elements, in the flat buffers
  int bucket = 0;
  // Duplicates (replicated parameters on TP ranks other than 0, replicated expert parameters on
  // expert-TP ranks other than 0, the last stage's copy of the tied word embedding) are counted once
  // in the gradient norm and written once to checkpoints.
  bool counts_in_grad_norm = true;

  int64_t numel() const { return slice.local_shape.numel(); }
  Range range() const { return {flat_offset, flat_offset + numel()}; }
  // The slice as runs of rows contiguous in the global tensor: one, or two for kGatedRows.
  std::vector<RowBlock> row_blocks() const;
  // The global row of local row r.
  int64_t global_row(int64_t local_row) const;
};

struct BucketPlan {
  Range range;                 // elements of the flat buffers, padding included
  std::vector<size_t> params;  // indices into ShardPlan::params()
  ParamDomain domain = ParamDomain::kDense;
};

// The data-parallel configuration a plan is made from.
struct ShardPlanConfig {
  int tensor_parallel_rank = 0;
  int tensor_parallel_size = 1;
  int data_parallel_rank = 0;
  int data_parallel_size = 1;
  bool distributed_optimizer = false;  // shard gradients' reduction and optimizer state over DP
  int64_t bucket_size = 0;             // elements; 0: one bucket
  std::vector<std::string> own_bucket;
  // Megatron-FSDP's communication units: buckets close only where a unit (param_unit) ends, once
  // they hold at least bucket_size elements (0: every unit alone).
  bool unit_buckets = false;
  // ZeRO-2 (with distributed_optimizer): the gradients are kept as this rank's shards only
  // (ParamStore), each bucket's full gradient existing only while its unit computes it.
  bool shard_gradients = false;
  // ZeRO-3 (with shard_gradients): the parameter values too are kept as this rank's shards only, a
  // bucket's full values existing only while a unit uses them (parallel/data_parallel/param_units.h).
  bool shard_parameters = false;
  // A later pipeline stage's copy of the tied word embedding counts once, on the first stage.
  bool first_pipeline_stage = true;
  // Expert parallelism: the expert tensor-parallel rank and size routed experts' parameters are
  // sliced over (size 0: the tensor-parallel rank and size).
  int expert_tensor_parallel_rank = 0;
  int expert_tensor_parallel_size = 0;
  // Expert parameters form their own domain (the expert grid's data-parallel group is not the
  // dense one: GridShape::expert_groups_are_dense() false), reduced and, with the distributed
  // optimizer, sharded over the expert data-parallel group: this rank's place in it and its size.
  bool separate_experts = false;
  int expert_data_parallel_rank = 0;
  int expert_data_parallel_size = 1;
};

class ShardPlan {
 public:
  // `specs` in forward order (the registry's); the plan keeps them.
  ShardPlan(std::vector<ParamSpec> specs, ShardPlanConfig config);
  // Placements point into the plan's specs: moving keeps them valid, copying would not.
  ShardPlan(ShardPlan&&) = default;
  ShardPlan& operator=(ShardPlan&&) = default;
  ShardPlan(const ShardPlan&) = delete;
  ShardPlan& operator=(const ShardPlan&) = delete;

  const ShardPlanConfig& config() const { return config_; }
  // In flat order (reverse order of first use).
  const std::vector<ParamPlacement>& params() const { return params_; }
  // The buckets, in the order their gradients become final in backward (front to back).
  const std::vector<BucketPlan>& buckets() const { return buckets_; }
  int64_t flat_elements() const { return flat_elements_; }
  // Elements of the flat buffers that belong to no parameter (alignment and bucket padding).
  int64_t padding_elements() const;

  // The group bucket b is reduced and sharded over: this rank's place in it and its size.
  DomainGroup group(ParamDomain domain) const;
  DomainGroup bucket_group(int bucket) const { return group(buckets_.at(static_cast<size_t>(bucket)).domain); }
  // [bucket] the size of its group; the smallest of them.
  std::vector<int> bucket_group_sizes() const;
  int smallest_group() const;
  // Whether some bucket is of the expert domain.
  bool has_expert_domain() const;
  // Whether routed experts are laid out apart (config().separate_experts): the same on every rank,
  // also where a pipeline stage holds no expert (collectives decide by this, not by the buckets).
  bool experts_apart() const { return config_.separate_experts; }
  // The slice of `spec` this rank holds: over the expert tensor-parallel group for a routed
  // expert's parameter, else over TP.
  SliceLayout slice_of(const ParamSpec& spec) const;

  // Rank r (of the bucket's group) part of bucket b: the r-th equal part with the distributed
  // optimizer, else the whole bucket.
  Range shard(int bucket, int data_parallel_rank) const;
  // This rank's shard of every bucket.
  std::vector<BucketShard> bucket_shards() const;
  // What this rank's optimizer updates: its shards, or the whole buffer.
  std::vector<Range> owned() const;
  // Gradients held as this rank's shards only (ZeRO-2 over more than one data-parallel rank, in
  // some domain).
  bool sharded_gradients() const;
  // Parameter values held as this rank's shards only (ZeRO-3 over more than one data-parallel rank).
  bool sharded_parameters() const;
  // The largest bucket (elements): the size of a unit's working gradient buffer under ZeRO-2.
  int64_t largest_bucket() const;

  // The parameter holding flat element `flat_index`, or nullptr for padding.
  const ParamPlacement* param_at(int64_t flat_index) const;
  // The elements `flat` (inside param's range) as rectangles of the parameter's global tensor.
  std::vector<GlobalRectangle> global_rectangles(const ParamPlacement& param, Range flat) const;

 private:
  std::vector<ParamSpec> specs_;
  ShardPlanConfig config_;
  std::vector<ParamPlacement> params_;
  std::vector<BucketPlan> buckets_;
  int64_t flat_elements_ = 0;

  // Lays out the parameters of one domain from `total` on (specs in reverse order), appending to
  // params_ and buckets_; returns the end of its last bucket.
  int64_t lay_out(ParamDomain domain, int64_t total);
  int tensor_rank(const ParamSpec& spec) const;
};

}  // namespace gpt
