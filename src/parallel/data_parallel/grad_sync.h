// Data-parallel reduction of a flat FP32 gradient buffer, bucket by bucket (Megatron's
// param-and-grad buffer): an all-reduce leaves every rank with the whole sum; for the distributed
// optimizer a reduce-scatter leaves rank r with the sum of its shard only, the r-th of DP equal
// parts of every bucket (the rest of the buffer keeps this rank's partial gradients). A bucket's
// reduction may start while backward still runs (--overlap-grad-reduce): start() as soon as its
// last gradient is final, progress() between layers, finish() before the optimizer step.
// With several distributed-optimizer instances (Megatron's partial distributed optimizer) the
// reduce-scatter runs over this rank's instance and its result, a shard every instance holds, is
// then all-reduced over the ranks holding the same shard in the other instances.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/arena.h"
#include "parallel/comm/communicator.h"
#include "parallel/data_parallel/range.h"

namespace gpt {

enum class GradientReduction { kAllReduce, kReduceScatter };

// [bucket] the group a bucket is reduced (and sharded) over: the data x context group (or the
// optimizer instance) for dense buckets, the expert data-parallel group for expert ones.
using BucketGroups = std::vector<Communicator*>;
// The same group for every one of `buckets` buckets.
BucketGroups same_group(Communicator& group, size_t buckets);
// [bucket] the size of each bucket's group.
std::vector<int> group_sizes(const BucketGroups& groups);

// Fatal unless every bucket lies in a buffer of `elements` and its shard is what the collectives
// over `group` give this rank: the rank-th equal part when `sharded`, else the whole bucket.
void check_bucket_shards(std::span<const BucketShard> buckets, const Communicator& group, int64_t elements,
                         bool sharded);

// The sizes of ZeRO-2/3's working buffers (gradients, gathered values): the largest bucket for the
// first, the second largest for the others. A unit uses at most two buckets at once, and a bucket
// goes to the smallest buffer it fits, so the largest bucket (the embedding, typically) always
// finds the first buffer free of a held bucket: a larger one would be the largest.
std::vector<int64_t> working_buffer_sizes(std::span<const BucketShard> buckets, int buffers);

class GradientSync {
 public:
  // `buckets`: disjoint ranges of `flat_grads` and this rank's shard of each, as the shard plan
  // (model/shard_plan.h) cut them; with kReduceScatter the shard must be the part a reduce-scatter
  // leaves on this rank (the rank-th of the group's equal parts), else the whole bucket. Scratch for
  // reduce-scatter results comes from `arena`. `across_instances` (kReduceScatter only; null or a
  // group of one without instances): the ranks holding this rank's shards in the other instances.
  GradientSync(Communicator& data_parallel, Tensor flat_grads, std::vector<BucketShard> buckets,
               GradientReduction reduction, Arena& arena, Communicator* across_instances = nullptr);
  // Each bucket over its own group (`groups`, one per bucket): expert parallelism's buckets.
  GradientSync(BucketGroups groups, Tensor flat_grads, std::vector<BucketShard> buckets, GradientReduction reduction,
               Arena& arena, Communicator* across_instances = nullptr);
  // The reduce-scatter outputs the constructor takes from its arena (one FP32 shard per bucket when
  // it reduce-scatters over more than one rank): the memory plan's count of them.
  static int64_t buffer_bytes(std::span<const BucketShard> buckets, int group_size, GradientReduction reduction);
  static int64_t buffer_bytes(std::span<const BucketShard> buckets, std::span<const int> group_sizes,
                              GradientReduction reduction);

  int num_buckets() const { return static_cast<int>(buckets_.size()); }
  GradientReduction reduction() const { return reduction_; }
  // This rank's shard of bucket b: what holds the full sum after finish() (the whole bucket with
  // all-reduce).
  Range shard(int bucket) const;
  std::vector<Range> shards() const;

  // Starts bucket b's reduction; a bucket already started this iteration is left alone.
  void start(Context& ctx, int bucket);
  // Lets started reductions advance (MPI moves data only inside MPI calls).
  void progress();
  // Starts the buckets not started yet, waits for all (a bucket's all-reduce across instances
  // starts as soon as its reduce-scatter is done), and leaves the sums in the shards. Returns
  // the seconds the host spent waiting (the reduction time not hidden behind other work).
  double finish(Context& ctx);

 private:
  // Whether each bucket needs its own reduce-scatter output.
  static bool scatters(GradientReduction reduction, int group_size) {
    return reduction == GradientReduction::kReduceScatter && group_size > 1;
  }
  // This rank's reduced shard of bucket b: the reduce-scatter's result, or the bucket itself when
  // the group is one rank.
  Tensor reduced(int bucket) const;
  Communicator& group(size_t bucket) const { return *groups_[bucket]; }

  BucketGroups groups_;
  Communicator* across_;  // null unless there are several distributed-optimizer instances
  Tensor flat_grads_;
  std::vector<BucketShard> buckets_;
  GradientReduction reduction_;
  std::vector<Tensor> scattered_;  // [bucket] this rank's reduce-scatter result (empty over one rank)
  std::vector<CollectiveHandle> handles_;         // [bucket] the reduction over the group
  std::vector<CollectiveHandle> across_handles_;  // [bucket] the all-reduce across instances
  std::vector<bool> started_;
};

}  // namespace gpt
