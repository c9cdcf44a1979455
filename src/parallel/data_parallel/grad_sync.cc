#include "parallel/data_parallel/grad_sync.h"

#include <chrono>

#include "core/check.h"
#include "kernels/ops.h"

namespace gpt {

GradientSync::GradientSync(Communicator& data_parallel, Tensor flat_grads, std::vector<Range> buckets,
                           GradientReduction reduction, Arena& arena)
    : group_(data_parallel),
      flat_grads_(std::move(flat_grads)),
      buckets_(std::move(buckets)),
      reduction_(reduction),
      handles_(buckets_.size()),
      started_(buckets_.size(), false) {
  GPT_CHECK(flat_grads_.dtype() == DType::kFloat32) << "gradients are float32";
  for (const Range& b : buckets_) {
    GPT_CHECK(b.begin >= 0 && b.end <= flat_grads_.numel() && !b.empty()) << "bucket outside the gradients";
    if (reduction_ == GradientReduction::kReduceScatter) {
      GPT_CHECK_EQ(b.size() % group_.size(), 0) << "bucket of " << b.size() << " elements over " << group_.size()
                                                << " data-parallel ranks";
      if (group_.size() > 1) scattered_.push_back(arena.allocate(DType::kFloat32, {b.size() / group_.size()}));
    }
  }
}

Range GradientSync::shard(int bucket) const {
  const Range& b = buckets_[static_cast<size_t>(bucket)];
  if (reduction_ == GradientReduction::kAllReduce) return b;
  const int64_t n = b.size() / group_.size();
  return {b.begin + group_.rank() * n, b.begin + (group_.rank() + 1) * n};
}

std::vector<Range> GradientSync::shards() const {
  std::vector<Range> all;
  for (int b = 0; b < num_buckets(); ++b) all.push_back(shard(b));
  return all;
}

void GradientSync::start(Context& ctx, int bucket) {
  const size_t b = static_cast<size_t>(bucket);
  if (started_[b]) return;
  started_[b] = true;
  if (group_.size() == 1) return;
  const Tensor grads = flat_grads_.flat_range(buckets_[b].begin, buckets_[b].size());
  handles_[b] = reduction_ == GradientReduction::kAllReduce
                    ? group_.start_all_reduce(ctx, grads, ReduceOp::kSum)
                    : group_.start_reduce_scatter(ctx, scattered_[b], grads, ReduceOp::kSum);
}

void GradientSync::progress() {
  for (CollectiveHandle& handle : handles_) handle.progress();
}

double GradientSync::finish(Context& ctx) {
  for (int b = 0; b < num_buckets(); ++b) start(ctx, b);
  const auto waiting = std::chrono::steady_clock::now();
  for (size_t b = 0; b < buckets_.size(); ++b) {
    handles_[b].wait(ctx);
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
