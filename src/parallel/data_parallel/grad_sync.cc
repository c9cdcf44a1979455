#include "parallel/data_parallel/grad_sync.h"

#include <algorithm>
#include <chrono>
#include <functional>

#include "core/check.h"
#include "kernels/ops.h"

namespace gpt {

namespace {

// The part of `bucket` a reduce-scatter or an all-gather over `group` leaves on / takes from this
// rank: the rank-th of the group's equal parts.
Range collective_part(const Range& bucket, const Communicator& group) {
  const int64_t n = bucket.size() / group.size();
  return {bucket.begin + group.rank() * n, bucket.begin + (group.rank() + 1) * n};
}

}  // namespace

std::vector<int64_t> working_buffer_sizes(std::span<const BucketShard> buckets, int buffers) {
  std::vector<int64_t> sizes;
  for (const BucketShard& b : buckets) sizes.push_back(b.bucket.size());
  std::sort(sizes.begin(), sizes.end(), std::greater<>());
  const int64_t first = sizes.empty() ? 0 : sizes[0], others = sizes.size() > 1 ? sizes[1] : first;
  std::vector<int64_t> result(static_cast<size_t>(buffers), others);
  if (!result.empty()) result[0] = first;
  return result;
}

void check_bucket_shards(std::span<const BucketShard> buckets, const Communicator& group, int64_t elements,
                         bool sharded) {
  for (const BucketShard& b : buckets) {
    GPT_CHECK(b.bucket.begin >= 0 && b.bucket.end <= elements && !b.bucket.empty()) << "bucket outside the buffer";
    if (!sharded) {
      GPT_CHECK(b.shard == b.bucket) << "an unsharded bucket's shard is the bucket";
      continue;
    }
    GPT_CHECK_EQ(b.bucket.size() % group.size(), 0)
        << "bucket of " << b.bucket.size() << " elements over " << group.size() << " data-parallel ranks";
    GPT_CHECK(b.shard == collective_part(b.bucket, group))
        << "the shard plan's shard [" << b.shard.begin << ", " << b.shard.end << ") of data-parallel rank "
        << group.rank() << " is not the part its collectives give it";
  }
}

GradientSync::GradientSync(Communicator& data_parallel, Tensor flat_grads, std::vector<BucketShard> buckets,
                           GradientReduction reduction, Arena& arena, Communicator* across_instances)
    : group_(data_parallel),
      across_(across_instances && across_instances->size() > 1 ? across_instances : nullptr),
      flat_grads_(std::move(flat_grads)),
      buckets_(std::move(buckets)),
      reduction_(reduction),
      handles_(buckets_.size()),
      across_handles_(buckets_.size()),
      started_(buckets_.size(), false) {
  GPT_CHECK(flat_grads_.dtype() == DType::kFloat32) << "gradients are float32";
  const bool sharded = reduction_ == GradientReduction::kReduceScatter;
  GPT_CHECK(across_ == nullptr || sharded) << "distributed-optimizer instances need the reduce-scatter";
  check_bucket_shards(buckets_, group_, flat_grads_.numel(), sharded && group_.size() > 1);
  for (const BucketShard& b : buckets_) {
    if (scatters(reduction_, group_.size())) scattered_.push_back(arena.allocate(DType::kFloat32, {b.shard.size()}));
  }
}

int64_t GradientSync::buffer_bytes(std::span<const BucketShard> buckets, int group_size, GradientReduction reduction) {
  int64_t bytes = 0;
  for (const BucketShard& b : buckets) {
    if (scatters(reduction, group_size)) bytes += Arena::aligned_bytes(DType::kFloat32, Shape{b.shard.size()});
  }
  return bytes;
}

Range GradientSync::shard(int bucket) const { return buckets_[static_cast<size_t>(bucket)].shard; }

std::vector<Range> GradientSync::shards() const {
  std::vector<Range> all;
  for (int b = 0; b < num_buckets(); ++b) all.push_back(shard(b));
  return all;
}

Tensor GradientSync::reduced(int bucket) const {
  if (group_.size() > 1) return scattered_[static_cast<size_t>(bucket)];
  const Range s = shard(bucket);
  return flat_grads_.flat_range(s.begin, s.size());
}

void GradientSync::start(Context& ctx, int bucket) {
  const size_t b = static_cast<size_t>(bucket);
  if (started_[b]) return;
  started_[b] = true;
  if (group_.size() == 1) {
    // Instances of one rank each: the whole bucket is the shard, all-reduced across them at once.
    if (across_) across_handles_[b] = across_->start_all_reduce(ctx, reduced(bucket), ReduceOp::kSum);
    return;
  }
  const Range& bucket_range = buckets_[b].bucket;
  const Tensor grads = flat_grads_.flat_range(bucket_range.begin, bucket_range.size());
  handles_[b] = reduction_ == GradientReduction::kAllReduce
                    ? group_.start_all_reduce(ctx, grads, ReduceOp::kSum)
                    : group_.start_reduce_scatter(ctx, scattered_[b], grads, ReduceOp::kSum);
}

void GradientSync::progress() {
  for (CollectiveHandle& handle : handles_) handle.progress();
  for (CollectiveHandle& handle : across_handles_) handle.progress();
}

double GradientSync::finish(Context& ctx) {
  for (int b = 0; b < num_buckets(); ++b) start(ctx, b);
  const auto waiting = std::chrono::steady_clock::now();
  if (across_ && group_.size() > 1) {
    // Each instance's reduce-scatter sums its ranks' gradients; the all-reduce of the shard across
    // instances adds the other instances' sums (Megatron's order: reduce-scatter, then all-reduce).
    for (size_t b = 0; b < buckets_.size(); ++b) {
      handles_[b].wait(ctx);
      across_handles_[b] = across_->start_all_reduce(ctx, reduced(static_cast<int>(b)), ReduceOp::kSum);
    }
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    handles_[b].wait(ctx);
    across_handles_[b].wait(ctx);
    if (reduction_ == GradientReduction::kReduceScatter && group_.size() > 1) {
      const Range s = shard(static_cast<int>(b));
      ops::copy(ctx, flat_grads_.flat_range(s.begin, s.size()), scattered_[b]);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - waiting).count();
  started_.assign(buckets_.size(), false);
  return seconds;
}

}  // namespace gpt
