#include "parallel/data_parallel/grad_shards.h"

#include <algorithm>
#include <chrono>

#include "core/check.h"
#include "kernels/ops.h"
#include "parallel/data_parallel/grad_sync.h"

namespace gpt {

int64_t GradientShards::bytes(std::span<const BucketShard> buckets, int data_parallel_size, int buffers) {
  int64_t total = 0;
  for (int64_t n : working_buffer_sizes(buckets, buffers)) {
    total += Arena::aligned_bytes(DType::kFloat32, Shape{n}) +
             Arena::aligned_bytes(DType::kFloat32, Shape{n / data_parallel_size});
  }
  return total;
}

GradientShards::GradientShards(Communicator& data_parallel, Tensor shards, std::vector<BucketShard> buckets,
                               int buffers, bool overlap, PointGrads point_grads, Arena& arena)
    : GradientShards(std::vector<Communicator*>(buckets.size(), &data_parallel), std::move(shards), buckets,
                     buffers, overlap, std::move(point_grads), arena) {}

GradientShards::GradientShards(std::vector<Communicator*> groups, Tensor shards, std::vector<BucketShard> buckets,
                               int buffers, bool overlap, PointGrads point_grads, Arena& arena)
    : groups_(std::move(groups)),
      shards_(std::move(shards)),
      buckets_(std::move(buckets)),
      overlap_(overlap),
      point_grads_(std::move(point_grads)),
      buffers_(static_cast<size_t>(buffers)),
      held_(buckets_.size(), -1) {
  GPT_CHECK_EQ(groups_.size(), buckets_.size()) << "a group for every bucket";
  int smallest = 0, largest = 0;
  for (const Communicator* group : groups_) {
    smallest = smallest == 0 ? group->size() : std::min(smallest, group->size());
    largest = std::max(largest, group->size());
  }
  GPT_CHECK(largest > 1) << "gradient shards over one data-parallel rank";
  GPT_CHECK(buffers >= 2) << "ZeRO-2 needs at least two working gradient buffers";
  GPT_CHECK(shards_.dtype() == DType::kFloat32) << "gradients are float32";
  int64_t elements = 0;
  for (const BucketShard& b : buckets_) {
    shard_offsets_.push_back(elements);
    elements += b.shard.size();
  }
  GPT_CHECK_EQ(elements, shards_.numel()) << "gradient shards for another shard plan";
  int64_t flat_end = 0;
  for (const BucketShard& b : buckets_) flat_end = std::max(flat_end, b.bucket.end);
  for (size_t b = 0; b < buckets_.size(); ++b) {
    check_bucket_shards(std::span(&buckets_[b], 1), *groups_[b], flat_end, /*sharded=*/true);
  }
  const std::vector<int64_t> sizes = working_buffer_sizes(buckets_, buffers);
  for (size_t i = 0; i < buffers_.size(); ++i) {
    buffers_[i].gradients = arena.allocate(DType::kFloat32, {sizes[i]});
    buffers_[i].scattered = arena.allocate(DType::kFloat32, {sizes[i] / smallest});
  }
  buffer_sizes_ = sizes;
  std::sort(buffer_sizes_.begin(), buffer_sizes_.end());
  buffer_sizes_.erase(std::unique(buffer_sizes_.begin(), buffer_sizes_.end()), buffer_sizes_.end());
}

void GradientShards::take(Context& ctx, int bucket) {
  const size_t b = static_cast<size_t>(bucket);
  if (held_[b] >= 0) {
    ++buffers_[static_cast<size_t>(held_[b])].pins;
    return;
  }
  Buffer& buffer = free_buffer(ctx, bucket);
  const int64_t size = buckets_[b].bucket.size();
  const Tensor gradients = buffer.gradients.flat_range(0, size);
  ops::zero(ctx, gradients);
  buffer.state = State::kHeld;
  buffer.bucket = bucket;
  buffer.pins = 1;
  buffer.since = ++clock_;
  held_[b] = static_cast<int>(&buffer - buffers_.data());
  point_grads_(bucket, gradients);
}

GradientShards::Buffer& GradientShards::free_buffer(Context& ctx, int for_bucket) {
  // The smallest buffers the bucket fits first, a larger one only when those are all being
  // written. Within a size: a free buffer; else the oldest reduction in flight, completed; else the
  // oldest held bucket no unit is writing, reduced early.
  const int64_t needed = buckets_[static_cast<size_t>(for_bucket)].bucket.size();
  for (int64_t size : buffer_sizes_) {
    if (size < needed) continue;
    auto oldest = [&](State state) -> Buffer* {
      Buffer* best = nullptr;
      for (Buffer& buffer : buffers_) {
        if (buffer.gradients.numel() != size || buffer.state != state || buffer.pins > 0) continue;
        if (!best || buffer.since < best->since) best = &buffer;
      }
      return best;
    };
    if (Buffer* buffer = oldest(State::kFree)) return *buffer;
    if (Buffer* buffer = oldest(State::kReducing)) {
      complete(ctx, *buffer);
      return *buffer;
    }
    if (Buffer* evicted = oldest(State::kHeld)) {
      release(ctx, *evicted);
      complete(ctx, *evicted);
      return *evicted;
    }
  }
  GPT_CHECK(false) << "no working gradient buffer free for bucket " << for_bucket << ": one unit writes more buckets "
                   << "at once than there are buffers (" << buffers_.size() << ")";
  return buffers_.front();
}

void GradientShards::done(Context& ctx, int bucket, bool last_writer) {
  const int index = held_[static_cast<size_t>(bucket)];
  GPT_CHECK(index >= 0) << "bucket " << bucket << " done without being taken";
  Buffer& buffer = buffers_[static_cast<size_t>(index)];
  GPT_CHECK(buffer.pins > 0) << "bucket " << bucket << " done more often than taken";
  --buffer.pins;
  if (last_writer && buffer.pins == 0) release(ctx, buffer);
}

void GradientShards::release(Context& ctx, Buffer& buffer) {
  const size_t b = static_cast<size_t>(buffer.bucket);
  point_grads_(buffer.bucket, Tensor());
  held_[b] = -1;
  const BucketShard& part = buckets_[b];
  buffer.handle = groups_[b]->start_reduce_scatter(ctx, buffer.scattered.flat_range(0, part.shard.size()),
                                                  buffer.gradients.flat_range(0, part.bucket.size()), ReduceOp::kSum);
  buffer.state = State::kReducing;
  buffer.since = ++clock_;
  if (!overlap_) complete(ctx, buffer);
}

void GradientShards::complete(Context& ctx, Buffer& buffer) {
  if (buffer.state != State::kReducing) return;  // completed at release (no overlap)
  const size_t b = static_cast<size_t>(buffer.bucket);
  buffer.handle.wait(ctx);
  const Tensor shard = shards_.flat_range(shard_offsets_[b], buckets_[b].shard.size());
  ops::residual_add(ctx, shard, shard, buffer.scattered.flat_range(0, shard.numel()), Tensor());
  buffer.state = State::kFree;
  buffer.bucket = -1;
}

void GradientShards::progress() {
  for (Buffer& buffer : buffers_) buffer.handle.progress();
}

double GradientShards::finish(Context& ctx) {
  const auto waiting = std::chrono::steady_clock::now();
  std::vector<Buffer*> order;
  for (Buffer& buffer : buffers_) {
    if (buffer.state == State::kHeld) {
      GPT_CHECK_EQ(buffer.pins, 0) << "bucket " << buffer.bucket << " still being written at the end of backward";
      release(ctx, buffer);
    }
  }
  for (Buffer& buffer : buffers_) {
    if (buffer.state == State::kReducing) order.push_back(&buffer);
  }
  std::sort(order.begin(), order.end(), [](const Buffer* a, const Buffer* b) { return a->since < b->since; });
  for (Buffer* buffer : order) complete(ctx, *buffer);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - waiting).count();
}

}  // namespace gpt
