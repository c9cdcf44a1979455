// The distributed optimizer's second half: after each data-parallel rank has updated its shard of
// every bucket, the updated parameter values are all-gathered so that every rank holds the whole
// model again. Buckets are gathered one by one; with --overlap-param-gather they stay in flight
// until the next forward first reads them (wait_for) instead of being waited for at once.
#pragma once

#include <span>
#include <vector>

#include "core/arena.h"
#include "parallel/comm/communicator.h"
#include "parallel/data_parallel/range.h"

namespace gpt {

class ParamGather {
 public:
  // `buckets`: ranges of `flat_values` and this rank's shard of each, as the shard plan cut them (the
  // rank-th equal part: what an all-gather takes from it). Staging for the shards comes from `arena`.
  ParamGather(Communicator& data_parallel, Tensor flat_values, std::vector<BucketShard> buckets, Arena& arena);
  // Each bucket over its own group (`groups`, one per bucket: grad_sync.h's BucketGroups).
  ParamGather(std::vector<Communicator*> groups, Tensor flat_values, std::vector<BucketShard> buckets, Arena& arena);
  // The staging copies of the owned shards the constructor takes from its arena (one per bucket
  // over more than one rank): the memory plan's count of them.
  static int64_t buffer_bytes(std::span<const BucketShard> buckets, int group_size, DType dtype);
  static int64_t buffer_bytes(std::span<const BucketShard> buckets, std::span<const int> group_sizes, DType dtype);
  // Whether some bucket's group has more than one rank (else there is nothing to gather).
  bool gathers() const;

  // Starts gathering every bucket (after the optimizer step).
  void start(Context& ctx);
  // Waits for bucket b's gather if it is in flight.
  void wait_for(Context& ctx, int bucket);
  // Waits for every gather in flight.
  void wait_all(Context& ctx);
  bool in_flight() const;

 private:
  Communicator& group(size_t bucket) const { return *groups_[bucket]; }

  std::vector<Communicator*> groups_;  // [bucket]
  Tensor flat_values_;
  std::vector<BucketShard> buckets_;
  std::vector<Tensor> staging_;  // [bucket] this rank's part, gathered from (empty over one rank)
  std::vector<CollectiveHandle> handles_;
};

}  // namespace gpt
