// Data-parallel reduction of a flat FP32 gradient buffer, bucket by bucket (Megatron's
// param-and-grad buffer): an all-reduce leaves every rank with the whole sum; for the distributed
// optimizer a reduce-scatter leaves rank r with the sum of its shard only, the r-th of DP equal
// parts of every bucket (the rest of the buffer keeps this rank's partial gradients). A bucket's
// reduction may start while backward still runs (--overlap-grad-reduce): start() as soon as its
// last gradient is final, progress() between layers, finish() before the optimizer step.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/arena.h"
#include "parallel/comm/communicator.h"
#include "parallel/data_parallel/range.h"

namespace gpt {

enum class GradientReduction { kAllReduce, kReduceScatter };

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
  // reduce-scatter results comes from `arena`.
  GradientSync(Communicator& data_parallel, Tensor flat_grads, std::vector<BucketShard> buckets,
               GradientReduction reduction, Arena& arena);

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
  // Starts the buckets not started yet, waits for all, and leaves the sums in the shards. Returns
  // the seconds the host spent waiting (the reduction time not hidden behind other work).
  double finish(Context& ctx);

 private:
  Communicator& group_;
  Tensor flat_grads_;
  std::vector<BucketShard> buckets_;
  GradientReduction reduction_;
  std::vector<Tensor> scattered_;  // [bucket] this rank's reduce-scatter result, copied back into its shard
  std::vector<CollectiveHandle> handles_;
  std::vector<bool> started_;
};

}  // namespace gpt
