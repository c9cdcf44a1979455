#include "parallel/data_parallel/param_gather.h"

#include "core/check.h"
#include "parallel/data_parallel/grad_sync.h"
#include "core/phase_timer.h"
#include "kernels/ops.h"

namespace gpt {

ParamGather::ParamGather(Communicator& data_parallel, Tensor flat_values, std::vector<BucketShard> buckets,
                         Arena& arena)
    : group_(data_parallel), flat_values_(std::move(flat_values)), buckets_(std::move(buckets)),
      handles_(buckets_.size()) {
  check_bucket_shards(buckets_, group_, flat_values_.numel(), group_.size() > 1);
  for (const BucketShard& b : buckets_) {
    // The gather reads from a copy of the owned part: its output (the whole bucket) contains it.
    if (group_.size() > 1) staging_.push_back(arena.allocate(flat_values_.dtype(), {b.shard.size()}));
  }
}

int64_t ParamGather::buffer_bytes(std::span<const BucketShard> buckets, int group_size, DType dtype) {
  int64_t bytes = 0;
  for (const BucketShard& b : buckets) {
    if (group_size > 1) bytes += Arena::aligned_bytes(dtype, Shape{b.shard.size()});
  }
  return bytes;
}

void ParamGather::start(Context& ctx) {
  if (group_.size() == 1) return;
  for (size_t b = 0; b < buckets_.size(); ++b) {
    GPT_CHECK(!handles_[b].pending()) << "parameter gather started twice";
    const BucketShard& part = buckets_[b];
    ops::copy(ctx, staging_[b], flat_values_.flat_range(part.shard.begin, part.shard.size()));
    handles_[b] = group_.start_all_gather(ctx, flat_values_.flat_range(part.bucket.begin, part.bucket.size()),
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
