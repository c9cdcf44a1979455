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

BucketGroups same_group(Communicator& group, size_t buckets) { return BucketGroups(buckets, &group); }

std::vector<int> group_sizes(const BucketGroups& groups) {
  std::vector<int> sizes;
  for (const Communicator* group : groups) sizes.push_back(group->size());
  return sizes;
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
    // `buckets` copied, not moved: the groups are sized from it in the same call.
    : GradientSync(same_group(data_parallel, buckets.size()), std::move(flat_grads), buckets, reduction,
                   arena, across_instances) {}

GradientSync::GradientSync(BucketGroups groups, Tensor flat_grads, std::vector<BucketShard> buckets,
                           GradientReduction reduction, Arena& arena, Communicator* across_instances)
    : groups_(std::move(groups)),
      across_(across_instances && across_instances->size() > 1 ? across_instances : nullptr),
      flat_grads_(std::move(flat_grads)),
      buckets_(std::move(buckets)),
      reduction_(reduction),
      scattered_(buckets_.size()),
      handles_(buckets_.size()),
      across_handles_(buckets_.size()),
      started_(buckets_.size(), false) {
  GPT_CHECK(flat_grads_.dtype() == DType::kFloat32) << "gradients are float32";
  GPT_CHECK_EQ(groups_.size(), buckets_.size()) << "a group for every bucket";
  const bool sharded = reduction_ == GradientReduction::kReduceScatter;
  GPT_CHECK(across_ == nullptr || sharded) << "distributed-optimizer instances need the reduce-scatter";
  for (size_t b = 0; b < buckets_.size(); ++b) {
    check_bucket_shards(std::span(&buckets_[b], 1), group(b), flat_grads_.numel(), sharded && group(b).size() > 1);
    if (scatters(reduction_, group(b).size())) {
      scattered_[b] = arena.allocate(DType::kFloat32, {buckets_[b].shard.size()});
    }
  }
}

int64_t GradientSync::buffer_bytes(std::span<const BucketShard> buckets, int group_size, GradientReduction reduction) {
  const std::vector<int> sizes(buckets.size(), group_size);
  return buffer_bytes(buckets, sizes, reduction);
}

int64_t GradientSync::buffer_bytes(std::span<const BucketShard> buckets, std::span<const int> group_sizes,
                                   GradientReduction reduction) {
  GPT_CHECK_EQ(buckets.size(), group_sizes.size()) << "a group size for every bucket";
  int64_t bytes = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (scatters(reduction, group_sizes[b])) {
      bytes += Arena::aligned_bytes(DType::kFloat32, Shape{buckets[b].shard.size()});
    }
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
  if (group(static_cast<size_t>(bucket)).size() > 1) return scattered_[static_cast<size_t>(bucket)];
  const Range s = shard(bucket);
  return flat_grads_.flat_range(s.begin, s.size());
}

void GradientSync::start(Context& ctx, int bucket) {
  const size_t b = static_cast<size_t>(bucket);
  if (started_[b]) return;
  started_[b] = true;
  if (group(b).size() == 1) {
    // Instances of one rank each: the whole bucket is the shard, all-reduced across them at once.
    if (across_) across_handles_[b] = across_->start_all_reduce(ctx, reduced(bucket), ReduceOp::kSum);
    return;
  }
  const Range& bucket_range = buckets_[b].bucket;
  const Tensor grads = flat_grads_.flat_range(bucket_range.begin, bucket_range.size());
  handles_[b] = reduction_ == GradientReduction::kAllReduce
                    ? group(b).start_all_reduce(ctx, grads, ReduceOp::kSum)
                    : group(b).start_reduce_scatter(ctx, scattered_[b], grads, ReduceOp::kSum);
}

void GradientSync::progress() {
  for (CollectiveHandle& handle : handles_) handle.progress();
  for (CollectiveHandle& handle : across_handles_) handle.progress();
}

double GradientSync::finish(Context& ctx) {
  for (int b = 0; b < num_buckets(); ++b) start(ctx, b);
  const auto waiting = std::chrono::steady_clock::now();
  if (across_) {
    // Each instance's reduce-scatter sums its ranks' gradients; the all-reduce of the shard across
    // instances adds the other instances' sums (Megatron's order: reduce-scatter, then all-reduce).
    for (size_t b = 0; b < buckets_.size(); ++b) {
      if (group(b).size() == 1) continue;  // started with the bucket
      handles_[b].wait(ctx);
      across_handles_[b] = across_->start_all_reduce(ctx, reduced(static_cast<int>(b)), ReduceOp::kSum);
    }
  }
  for (size_t b = 0; b < buckets_.size(); ++b) {
    handles_[b].wait(ctx);
    across_handles_[b].wait(ctx);
    if (scatters(reduction_, group(b).size())) {
      const Range s = shard(static_cast<int>(b));
      ops::copy(ctx, flat_grads_.flat_range(s.begin, s.size()), scattered_[b]);
    }
  }
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - waiting).count();
  started_.assign(buckets_.size(), false);
  return seconds;
}

}  // namespace gpt
