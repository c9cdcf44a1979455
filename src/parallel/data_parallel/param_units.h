// ZeRO-3's parameters (Megatron-FSDP's optim_grads_params): each data-parallel rank keeps its shard
// of every bucket only ([sum of its shards] in the compute dtype, ParamStore::value_storage). A
// bucket's full values exist only while a unit (a layer, the embedding, the output layer) uses
// them: before the unit's forward, recompute or backward they are all-gathered into one of a few
// fixed working buffers (the first of the largest bucket's size, the others of the second
// largest), and the parameters' values point into it until the unit is done.
//
// The policy, under pipeline parallelism too: a released bucket stays gathered in its buffer
// until the buffer is taken for another bucket (least recently used first); the values cannot
// change within an iteration, so a unit found still gathered is used as it is, and everything is
// forgotten when the parameters change (after the optimizer step, at the start of an iteration).
// With two buffers a unit is gathered again for its backward whenever another unit ran between
// (Megatron-FSDP's behaviour); every further buffer keeps more units gathered over the
// microbatches of a pipeline step, at one bucket's bytes each.
//
// Prefetch (--overlap-param-gather): while a unit computes, the gather of the unit that runs next
// in the same chunk (the following one in forward, the preceding one in backward) is started into
// a buffer no unit is using; its wait comes at that unit's acquire.
//
// Every data-parallel rank runs the same units in the same order, so the gathers, and which
// buffer each takes, are the same on every rank: the collectives match.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <vector>

#include "core/arena.h"
#include "parallel/comm/communicator.h"
#include "parallel/data_parallel/range.h"

namespace gpt {

class ParamUnits {
 public:
  // Called with a bucket and its gathered buffer [bucket size] once its values are there, and with
  // an empty tensor when the buffer is taken for another bucket: where the bucket's parameters'
  // values point.
  using PointValues = std::function<void(int bucket, const Tensor& buffer)>;

  // `shards`: [sum of the buckets' shard sizes] in the compute dtype, the buckets' shards one after
  // another (bucket order). `buffers`: at least 2 (the most buckets a unit uses at once: its own
  // and the tied word embedding's).
  ParamUnits(Communicator& data_parallel, Tensor shards, std::vector<BucketShard> buckets, int buffers,
             PointValues point_values, Arena& arena);
  // Each bucket over its own group (`groups`, one per bucket: grad_sync.h's BucketGroups).
  ParamUnits(std::vector<Communicator*> groups, Tensor shards, std::vector<BucketShard> buckets, int buffers,
             PointValues point_values, Arena& arena);
  // The working buffers' bytes, as the constructor takes them from its arena.
  static int64_t bytes(std::span<const BucketShard> buckets, DType dtype, int buffers);

  // Bucket b's values gathered and held until the matching release().
  void acquire(Context& ctx, int bucket);
  void release(int bucket);
  // Starts gathering bucket b when it is not gathered and a buffer no unit holds is free; else
  // nothing.
  void prefetch(Context& ctx, int bucket);
  // The shards changed (optimizer step, checkpoint load): no gathered buffer is valid any more.
  // Waits for gathers in flight.
  void invalidate(Context& ctx);

  // Counters since construction: gathers started (of them prefetched), elements gathered into the
  // buffers (whole buckets; each rank sends its shard of each), and the seconds the host waited
  // for gathers at acquire (what prefetch did not hide).
  struct Counters {
    int64_t gathers = 0;
    int64_t prefetches = 0;
    int64_t gathered_elements = 0;
    double wait_seconds = 0.0;
  };
  const Counters& counters() const { return counters_; }

 private:
  enum class State { kFree, kGathering, kGathered };
  struct Buffer {
    Tensor values;  // [largest bucket] for the first buffer, [second largest] for the others
    State state = State::kFree;
    int bucket = -1;
    int pins = 0;  // units using it now
    uint64_t since = 0;
    CollectiveHandle handle;
  };
  // A buffer bucket b fits in that no unit holds, its old bucket evicted: the smallest size first,
  // within a size a free one, else the least recently used. A prefetch takes no buffer whose gather
  // is in flight. Null when there is none.
  Buffer* take_buffer(Context& ctx, int bucket, bool for_prefetch);
  void start_gather(Context& ctx, Buffer& buffer, int bucket, bool prefetch);
  void wait(Context& ctx, Buffer& buffer);
  void evict(Context& ctx, Buffer& buffer);

  std::vector<Communicator*> groups_;  // [bucket]
  Tensor shards_;
  std::vector<BucketShard> buckets_;
  std::vector<int64_t> shard_offsets_;  // [bucket] in shards_
  PointValues point_values_;
  std::vector<Buffer> buffers_;
  std::vector<int64_t> sizes_;  // the buffers' distinct sizes, ascending (take_buffer's order, no allocation)
  std::vector<int> held_;  // [bucket] the buffer holding it, or -1
  uint64_t clock_ = 0;
  Counters counters_;
};

}  // namespace gpt
