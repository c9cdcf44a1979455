// The data-parallel side of a training step for this rank's parameters (Megatron's
// DistributedDataParallel plus the distributed optimizer's communication), one strategy per ZeRO
// stage behind this interface, chosen by the shard plan (make_data_parallel.h):
// - ReplicatedGradients (ZeRO-0/1, replicated_gradients.h): full gradients, every bucket
//   all-reduced over DP, or reduce-scattered with the distributed optimizer, whose updated shards
//   are all-gathered after the step;
// - ShardedGradients (ZeRO-2, sharded_gradients.h): each rank keeps only its shards of the
//   gradients, every microbatch's bucket reduce-scattered into them when its units are done;
// - ShardedParameters (ZeRO-3, sharded_parameters.h): the sharded gradients, and the values kept
//   as shards too, a unit's buckets all-gathered before each use and released after it.
// Every strategy sums the gradients replicated over TP and the tied embedding's two copies
// (gradient_sums.h) and counts readiness from the group table built at attach (group_table.h).
//
// A step: start_iteration, the forward and backward passes (the ParamObserver hooks, in the order
// model/param_observer.h draws), finish_gradients, the optimizer step, after_step; settle before
// evaluation and at the end.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "core/context.h"
#include "model/gpt_model.h"
#include "model/param_observer.h"
#include "model/shard_plan.h"
#include "parallel/data_parallel/range.h"
#include "train/data_parallel/config.h"

namespace gpt {

class DataParallel : public ParamObserver {
 public:
  ~DataParallel() override = default;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  // The chunks whose parameters this covers (their parameter groups say when gradients are
  // final): builds the group table, and observes the chunks where the strategy needs the hooks.
  virtual void attach(std::span<GptModel* const> chunks) = 0;
  // Before the iteration's first forward.
  virtual void start_iteration(Context& ctx) = 0;
  // After the iteration's backward: completes every reduction; the owned ranges then hold the
  // global gradient sums. Returns the seconds the host waited for data-parallel reductions.
  virtual double finish_gradients(Context& ctx) = 0;
  // After the optimizer step: the updated shards reach every rank that reads them.
  virtual void after_step(Context& ctx) = 0;
  // Waits for parameter gathers still in flight (before evaluation, or at the end).
  virtual void settle(Context& ctx) = 0;

  bool distributed_optimizer() const { return plan_.config().distributed_optimizer; }
  // The ZeRO-2/3 working gradient buffers this took from the arena (0 otherwise), measured.
  virtual int64_t gradient_buffer_bytes() const { return 0; }
  // The ZeRO-3 working parameter buffers this took from the arena (0 otherwise), measured.
  virtual int64_t parameter_buffer_bytes() const { return 0; }
  // ZeRO-3: one line on this rank's parameter gathers per iteration over `iterations` (evaluation's
  // included): gathers, prefetched ones, bytes gathered and sent, the host's wait for them. Empty
  // for the other strategies, or without iterations.
  virtual std::string gather_summary(int64_t iterations) const { return std::string(); }

 protected:
  explicit DataParallel(const ShardPlan& plan) : plan_(plan) {}
  // Makes this the observer of `chunks`' parameters.
  void observe(std::span<GptModel* const> chunks) {
    for (GptModel* chunk : chunks) chunk->set_observer(this);
  }

 private:
  const ShardPlan& plan_;
};

}  // namespace gpt
