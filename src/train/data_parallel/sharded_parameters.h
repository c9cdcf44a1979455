// ZeRO-3 (Megatron-FSDP's optim_grads_params): the sharded gradients of ZeRO-2 (a ShardedGradients
// inside, which every hook is passed on to) and the values kept as this rank's shards too
// (parallel/data_parallel/param_units.h): a unit's buckets are all-gathered before each use and
// released after it, the next unit's gather prefetched with --overlap-param-gather (the following
// group in forward, the preceding one in backward: the group table's neighbours).
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>

#include "core/arena.h"
#include "parallel/data_parallel/param_units.h"
#include "parallel/process_grid.h"
#include "parallel/tensor_parallel/regions.h"
#include "train/data_parallel/sharded_gradients.h"
#include "train/data_parallel/strategy.h"

namespace gpt {

class ShardedParameters final : public DataParallel {
 public:
  // The buckets and this rank's shards of them come from params.plan() (sharded parameters).
  ShardedParameters(const DataParallelConfig& config, ProcessGrid& grid, ParamStore& params, const TensorParallel& tp,
                    Arena& arena);

  void attach(std::span<GptModel* const> chunks) override;
  void start_iteration(Context& ctx) override;
  double finish_gradients(Context& ctx) override { return gradients_.finish_gradients(ctx); }
  void after_step(Context& ctx) override;
  void settle(Context& ctx) override { gradients_.settle(ctx); }
  int64_t gradient_buffer_bytes() const override { return gradients_.gradient_buffer_bytes(); }
  int64_t parameter_buffer_bytes() const override { return parameter_buffer_bytes_; }
  std::string gather_summary(int64_t iterations) const override;

  // Every use gathers the group's buckets first (and prefetches the next group's) and releases
  // them after; then the sharded gradients' hooks.
  void before_use(Context& ctx, const ParamGroup& group, ParamUse use, int slot) override;
  void after_use(Context& ctx, const ParamGroup& group, ParamUse use, int slot) override;
  void gradients_ready(Context& ctx, const ParamGroup& group, int slot, bool last_of_step) override {
    gradients_.gradients_ready(ctx, group, slot, last_of_step);
  }

 private:
  ProcessGrid& grid_;
  const ParamStore& params_;
  bool prefetch_;
  ShardedGradients gradients_;
  int64_t parameter_buffer_bytes_ = 0;  // before units_, whose construction measures it
  std::unique_ptr<ParamUnits> units_;
};

}  // namespace gpt
