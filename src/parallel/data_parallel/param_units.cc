#include "parallel/data_parallel/param_units.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "core/phase_timer.h"
#include "parallel/data_parallel/grad_sync.h"

namespace gpt {

int64_t ParamUnits::bytes(std::span<const BucketShard> buckets, DType dtype, int buffers) {
  int64_t total = 0;
  for (int64_t n : working_buffer_sizes(buckets, buffers)) total += Arena::aligned_bytes(dtype, Shape{n});
  return total;
}

ParamUnits::ParamUnits(Communicator& data_parallel, Tensor shards, std::vector<BucketShard> buckets, int buffers,
                       PointValues point_values, Arena& arena)
    : ParamUnits(std::vector<Communicator*>(buckets.size(), &data_parallel), std::move(shards), buckets,
                 buffers, std::move(point_values), arena) {}

ParamUnits::ParamUnits(std::vector<Communicator*> groups, Tensor shards, std::vector<BucketShard> buckets, int buffers,
                       PointValues point_values, Arena& arena)
    : groups_(std::move(groups)),
      shards_(std::move(shards)),
      buckets_(std::move(buckets)),
      point_values_(std::move(point_values)),
      buffers_(static_cast<size_t>(buffers)),
      held_(buckets_.size(), -1) {
  GPT_CHECK_EQ(groups_.size(), buckets_.size()) << "a group for every bucket";
  GPT_CHECK(std::any_of(groups_.begin(), groups_.end(), [](const Communicator* g) { return g->size() > 1; }))
      << "parameter shards over one data-parallel rank";
  GPT_CHECK(buffers >= 2) << "ZeRO-3 needs at least two working parameter buffers";
  int64_t elements = 0;
  for (const BucketShard& b : buckets_) {
    shard_offsets_.push_back(elements);
    elements += b.shard.size();
  }
  GPT_CHECK_EQ(elements, shards_.numel()) << "parameter shards for another shard plan";
  int64_t flat_end = 0;
  for (const BucketShard& b : buckets_) flat_end = std::max(flat_end, b.bucket.end);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    check_bucket_shards(std::span(&buckets_[b], 1), *groups_[b], flat_end, /*sharded=*/true);
  }
  const std::vector<int64_t> sizes = working_buffer_sizes(buckets_, buffers);
  for (size_t i = 0; i < buffers_.size(); ++i) buffers_[i].values = arena.allocate(shards_.dtype(), {sizes[i]});
  sizes_ = sizes;
  std::sort(sizes_.begin(), sizes_.end());
  sizes_.erase(std::unique(sizes_.begin(), sizes_.end()), sizes_.end());
}

ParamUnits::Buffer* ParamUnits::take_buffer(Context& ctx, int bucket, bool for_prefetch) {
  const int64_t needed = buckets_[static_cast<size_t>(bucket)].bucket.size();
  for (int64_t size : sizes_) {
    if (size < needed) continue;
    Buffer* best = nullptr;  // a free buffer, else the least recently used
    for (Buffer& buffer : buffers_) {
      if (buffer.values.numel() != size || buffer.pins > 0) continue;
      if (for_prefetch && buffer.state == State::kGathering) continue;
      if (buffer.state == State::kFree) {
        best = &buffer;
        break;
      }
      if (!best || buffer.since < best->since) best = &buffer;
    }
    if (best) {
      evict(ctx, *best);
      return best;
    }
  }
  return nullptr;
}

void ParamUnits::evict(Context& ctx, Buffer& buffer) {
  if (buffer.state == State::kFree) return;
  wait(ctx, buffer);  // a gather in flight into it completes first
  point_values_(buffer.bucket, Tensor());
  held_[static_cast<size_t>(buffer.bucket)] = -1;
  buffer.state = State::kFree;
  buffer.bucket = -1;
}

void ParamUnits::start_gather(Context& ctx, Buffer& buffer, int bucket, bool prefetch) {
  const size_t b = static_cast<size_t>(bucket);
  const BucketShard& part = buckets_[b];
  buffer.handle = groups_[b]->start_all_gather(ctx, buffer.values.flat_range(0, part.bucket.size()),
                                          shards_.flat_range(shard_offsets_[b], part.shard.size()));
  buffer.state = State::kGathering;
  buffer.bucket = bucket;
  buffer.since = ++clock_;
  held_[b] = static_cast<int>(&buffer - buffers_.data());
  ++counters_.gathers;
  if (prefetch) ++counters_.prefetches;
  counters_.gathered_elements += part.bucket.size();
}

void ParamUnits::wait(Context& ctx, Buffer& buffer) {
  if (buffer.state != State::kGathering) return;
  const phase_timer::Scope timed(ctx, phase_timer::Phase::kParamsAllGather);
  const auto start = std::chrono::steady_clock::now();
  buffer.handle.wait(ctx);
  counters_.wait_seconds += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  buffer.state = State::kGathered;
  point_values_(buffer.bucket, buffer.values.flat_range(0, buckets_[static_cast<size_t>(buffer.bucket)].bucket.size()));
}

void ParamUnits::acquire(Context& ctx, int bucket) {
  const size_t b = static_cast<size_t>(bucket);
  Buffer* buffer = held_[b] >= 0 ? &buffers_[static_cast<size_t>(held_[b])] : nullptr;
  if (!buffer) {
    buffer = take_buffer(ctx, bucket, /*for_prefetch=*/false);
    GPT_CHECK(buffer != nullptr) << "no working parameter buffer free for bucket " << bucket
                                 << ": one unit uses more buckets at once than there are buffers (" << buffers_.size()
                                 << ")";
    start_gather(ctx, *buffer, bucket, /*prefetch=*/false);
  }
  wait(ctx, *buffer);
  ++buffer->pins;
  buffer->since = ++clock_;
}

void ParamUnits::release(int bucket) {
  const int index = held_[static_cast<size_t>(bucket)];
  GPT_CHECK(index >= 0) << "bucket " << bucket << " released without being acquired";
  Buffer& buffer = buffers_[static_cast<size_t>(index)];
  GPT_CHECK(buffer.pins > 0) << "bucket " << bucket << " released more often than acquired";
  --buffer.pins;
}

void ParamUnits::prefetch(Context& ctx, int bucket) {
  if (held_[static_cast<size_t>(bucket)] >= 0) return;
  Buffer* buffer = take_buffer(ctx, bucket, /*for_prefetch=*/true);
  if (buffer) start_gather(ctx, *buffer, bucket, /*prefetch=*/true);
}

void ParamUnits::invalidate(Context& ctx) {
  for (Buffer& buffer : buffers_) {
    GPT_CHECK_EQ(buffer.pins, 0) << "parameters changed while bucket " << buffer.bucket << " is in use";
    evict(ctx, buffer);
  }
}

}  // namespace gpt
