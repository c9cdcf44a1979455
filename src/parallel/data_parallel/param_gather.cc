#include "parallel/data_parallel/param_gather.h"

#include "core/check.h"
#include "parallel/data_parallel/grad_sync.h"
#include "core/phase_timer.h"
#include "kernels/ops.h"

namespace gpt {

ParamGather::ParamGather(Communicator& data_parallel, Tensor flat_values, std::vector<BucketShard> buckets,
                         Arena& arena)
    : ParamGather(std::vector<Communicator*>(buckets.size(), &data_parallel), std::move(flat_values),
                  buckets, arena) {}

ParamGather::ParamGather(std::vector<Communicator*> groups, Tensor flat_values, std::vector<BucketShard> buckets,
                         Arena& arena)
    : groups_(std::move(groups)), flat_values_(std::move(flat_values)), buckets_(std::move(buckets)),
      staging_(buckets_.size()), handles_(buckets_.size()) {
  GPT_CHECK_EQ(groups_.size(), buckets_.size()) << "a group for every bucket";
  for (size_t b = 0; b < buckets_.size(); ++b) {
    check_bucket_shards(std::span(&buckets_[b], 1), group(b), flat_values_.numel(), group(b).size() > 1);
    // The gather reads from a copy of the owned part: its output (the whole bucket) contains it.
    if (group(b).size() > 1) staging_[b] = arena.allocate(flat_values_.dtype(), {buckets_[b].shard.size()});
  }
}

int64_t ParamGather::buffer_bytes(std::span<const BucketShard> buckets, int group_size, DType dtype) {
  const std::vector<int> sizes(buckets.size(), group_size);
  return buffer_bytes(buckets, sizes, dtype);
}

int64_t ParamGather::buffer_bytes(std::span<const BucketShard> buckets, std::span<const int> group_sizes,
                                  DType dtype) {
  GPT_CHECK_EQ(buckets.size(), group_sizes.size()) << "a group size for every bucket";
  int64_t bytes = 0;
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (group_sizes[b] > 1) bytes += Arena::aligned_bytes(dtype, Shape{buckets[b].shard.size()});
  }
  return bytes;
}

bool ParamGather::gathers() const {
  for (const Communicator* group : groups_) {
    if (group->size() > 1) return true;
  }
  return false;
}

void ParamGather::start(Context& ctx) {
  for (size_t b = 0; b < buckets_.size(); ++b) {
    if (group(b).size() == 1) continue;
    GPT_CHECK(!handles_[b].pending()) << "parameter gather started twice";
    const BucketShard& part = buckets_[b];
    ops::copy(ctx, staging_[b], flat_values_.flat_range(part.shard.begin, part.shard.size()));
    handles_[b] = group(b).start_all_gather(ctx, flat_values_.flat_range(part.bucket.begin, part.bucket.size()),
                                            staging_[b]);
  }
}

void ParamGather::wait_for(Context& ctx, int bucket) {
  const phase_timer::Scope timed(ctx, phase_timer::Phase::kParamsAllGather);
  handles_[static_cast<size_t>(bucket)].wait(ctx);
}

void ParamGather::wait_all(Context& ctx) {
  const phase_timer::Scope timed(ctx, phase_timer::Phase::kParamsAllGather);
  for (CollectiveHandle& handle : handles_) handle.wait(ctx);
}

bool ParamGather::in_flight() const {
  for (const CollectiveHandle& handle : handles_) {
    if (handle.pending()) return true;
  }
  return false;
}

}  // namespace gpt
