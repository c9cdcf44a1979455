// ZeRO-2's gradients (Megatron-FSDP's optim_grads): each data-parallel rank keeps the sums of its
// shard of every bucket only, [sum of its shards] float32 (1/DP of the flat gradients). A bucket's
// full-size gradient exists only while a unit's backward writes it, in one of a few fixed working
// buffers (the largest bucket's size, and the second largest's): taken at the unit's first write in
// a microbatch, released when every unit writing it has written (the tied embedding's bucket has
// two: the output layer and the embedding), then reduce-scattered over DP and added into this
// rank's shard.
//
// Gradient accumulation over microbatches is therefore one reduce-scatter per bucket per
// microbatch (m times ZeRO-1's gradient traffic, (DP-1)/DP x 4 bytes x elements each time) instead
// of a full-size accumulator reduced once. A reduce-scatter is linear, so a held bucket may also be
// reduced early to free its buffer (evicted) and taken again later: every contribution is reduced
// exactly once, and the result is the sum whatever the order (up to FP32 rounding).
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/arena.h"
#include "parallel/comm/communicator.h"
#include "parallel/data_parallel/range.h"

namespace gpt {

class GradientShards {
 public:
  // Called with a bucket and its working buffer [bucket size] when taken, and with an empty tensor
  // when released: where the bucket's parameters' gradients point.
  using PointGrads = std::function<void(int bucket, const Tensor& buffer)>;

  // `shards`: [sum of the buckets' shard sizes], the buckets' shards one after another (bucket
  // order). `buffers`: working buffers; at least the buckets one unit writes at once (2: a unit's
  // own and the tied embedding's), one more lets a reduce-scatter run while the next unit computes.
  // The first holds the largest bucket, the others the second largest.
  // `overlap`: a released bucket's reduce-scatter is left in flight (else waited for at once).
  GradientShards(Communicator& data_parallel, Tensor shards, std::vector<BucketShard> buckets, int buffers,
                 bool overlap, PointGrads point_grads, Arena& arena);
  // Each bucket over its own group (`groups`, one per bucket: grad_sync.h's BucketGroups); a bucket
  // over one rank is its own shard. The reduce-scatter results are sized for the smallest group.
  GradientShards(std::vector<Communicator*> groups, Tensor shards, std::vector<BucketShard> buckets, int buffers,
                 bool overlap, PointGrads point_grads, Arena& arena);
  // The working buffers and the reduce-scatter results they need from the arena (`data_parallel_size`:
  // the smallest group's size).
  static int64_t bytes(std::span<const BucketShard> buckets, int data_parallel_size, int buffers);

  // A unit is about to write bucket b's gradients: its working buffer (zeroed when newly taken)
  // stays held at least until the matching done().
  void take(Context& ctx, int bucket);
  // The unit has written bucket b for this microbatch; `last_writer`: no other unit writes it in
  // this microbatch, so it is reduced now.
  void done(Context& ctx, int bucket, bool last_writer);
  // Lets reductions in flight advance.
  void progress();
  // Reduces every bucket still held and waits for all reductions: the shards hold the iteration's
  // sums. Returns the seconds the host waited.
  double finish(Context& ctx);

 private:
  enum class State { kFree, kHeld, kReducing };
  struct Buffer {
    Tensor gradients;  // [largest bucket] for the first buffer, [second largest] for the others
    Tensor scattered;  // [its size / the smallest group] the reduce-scatter's result
    State state = State::kFree;
    int bucket = -1;
    int pins = 0;      // units writing it now
    uint64_t since = 0;
    CollectiveHandle handle;
  };
  Buffer& free_buffer(Context& ctx, int for_bucket);
  void release(Context& ctx, Buffer& buffer);
  void complete(Context& ctx, Buffer& buffer);

  std::vector<Communicator*> groups_;  // [bucket]
  Tensor shards_;
  std::vector<BucketShard> buckets_;
  std::vector<int64_t> shard_offsets_;  // [bucket] in shards_
  bool overlap_;
  PointGrads point_grads_;
  std::vector<Buffer> buffers_;
  std::vector<int64_t> buffer_sizes_;  // the buffers' distinct sizes, ascending
  std::vector<int> held_;  // [bucket] the buffer holding it, or -1
  uint64_t clock_ = 0;
};

}  // namespace gpt
