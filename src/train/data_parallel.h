// The data-parallel side of a training step for this rank's parameters (Megatron's
// DistributedDataParallel plus the distributed optimizer's communication):
// - gradients: under sequence parallelism the replicated parameters' gradients are summed over TP
//   (one coalesced all-reduce per layer or per bucket, not one per parameter); the tied word
//   embedding's two copies (first and last pipeline stage) are summed over the embedding group;
//   then every bucket is all-reduced over DP, or reduce-scattered with --use-distributed-optimizer.
//   With --overlap-grad-reduce a bucket's reduction starts as soon as its last gradient is final
//   in the iteration's last backward, while the rest of backward runs. ZeRO-2 (Megatron-FSDP's
//   optim_grads): each rank keeps only its shards of the gradients; every microbatch's bucket is
//   reduce-scattered into them when its units are done (parallel/data_parallel/grad_shards.h);
// - parameters (distributed optimizer): after the step each rank's updated shard is all-gathered,
//   waited for at once, or with --overlap-param-gather bucket by bucket as the next forward first
//   reads it. ZeRO-3 (optim_grads_params): each rank keeps only its shards of the values too; a
//   unit's buckets are all-gathered before each use and released after it, the next unit's gather
//   prefetched with --overlap-param-gather (parallel/data_parallel/param_units.h).
#pragma once

#include <array>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "core/arena.h"
#include "model/gpt_model.h"
#include "model/param_store.h"
#include "parallel/data_parallel/grad_shards.h"
#include "parallel/data_parallel/grad_sync.h"
#include "parallel/data_parallel/param_gather.h"
#include "parallel/data_parallel/param_units.h"
#include "parallel/process_grid.h"
#include "parallel/tensor_parallel/regions.h"
#include "train/arguments.h"

namespace gpt {

// The data-parallel configuration of this rank's shard plan (model/shard_plan.h) from the flags:
// Megatron's buckets (--ddp-bucket-size, default max(4e7, 1e6 x DP) elements, with
// --overlap-grad-reduce only and on the first pipeline stage only; otherwise one bucket), the
// distributed optimizer's sharding, the tied word embedding alone when it spans pipeline stages.
ShardPlanConfig shard_plan_config_from(const Arguments& args, const GridShape& shape,
                                       const GridCoordinates& coordinates);

// What DataParallel does besides the shard plan's layout.
struct DataParallelConfig {
  bool overlap_grad_reduce = false;   // start a bucket's reduction when its gradients are final
  bool overlap_param_gather = false;  // gather a bucket's parameters when the next forward needs them
  bool tied_across_stages = false;    // the word embedding's two copies (first, last stage) summed
  // ZeRO-2 (the shard plan's sharded gradients): fixed working buffers of the largest bucket, two
  // (a unit's own bucket and the tied embedding's), three with --overlap-grad-reduce or
  // --fsdp-double-buffer (a reduce-scatter in flight while the next unit computes).
  int gradient_buffers = 2;
  // ZeRO-3 (sharded values): the gathered values' working buffers, two, three with
  // --overlap-param-gather or --fsdp-double-buffer (the next unit's gather while one computes).
  int parameter_buffers = 2;
};
DataParallelConfig data_parallel_config_from(const Arguments& args);

class DataParallel final : public ParamObserver {
 public:
  // The distributed optimizer's sharding, the buckets and their shards come from params.plan().
  DataParallel(const DataParallelConfig& config, ProcessGrid& grid, ParamStore& params, const TensorParallel& tp,
               Arena& arena);

  // The chunks whose parameters this covers (their parameter groups say when gradients are final).
  void attach(std::span<GptModel* const> chunks);

  // The ranges of the flat buffers this rank's optimizer updates: its shard of every bucket with
  // the distributed optimizer, else everything.
  std::vector<Range> owned() const;
  bool distributed_optimizer() const { return distributed_optimizer_; }
  // The ZeRO-2/3 working gradient buffers this took from the arena (0 otherwise), measured.
  int64_t gradient_buffer_bytes() const { return gradient_buffer_bytes_; }
  // The ZeRO-3 working parameter buffers this took from the arena (0 otherwise), measured.
  int64_t parameter_buffer_bytes() const { return parameter_buffer_bytes_; }
  // ZeRO-3's gathers so far (null without ZeRO-3).
  const ParamUnits* parameter_units() const { return units_.get(); }
  // ZeRO-3: one line on this rank's parameter gathers per iteration over `iterations` (evaluation's
  // included): gathers, prefetched ones, bytes gathered and sent, the host's wait for them.
  std::string gather_summary(int64_t iterations) const;

  // Before the iteration's first forward.
  void start_iteration(Context& ctx);
  // After the iteration's backward: completes every reduction; the owned ranges then hold the
  // global gradient sums. Returns the seconds the host waited for data-parallel reductions.
  double finish_gradients(Context& ctx);
  // After the optimizer step: gathers the updated shards (distributed optimizer).
  void after_step(Context& ctx);
  // Waits for parameter gathers still in flight (before evaluation, or at the end).
  void settle(Context& ctx);

  // ParamObserver: a forward waits for its group's parameter gathers; a group's gradients start
  // their reductions when final. ZeRO-2: a backward takes its buckets' working buffers, and every
  // microbatch's gradients are reduce-scattered into the shards when the unit is done. ZeRO-3:
  // every use gathers the group's buckets first (and prefetches the next group's) and releases
  // them after.
  void before_use(Context& ctx, const ParamGroup& group, ParamUse use, int slot) override;
  void after_use(Context& ctx, const ParamGroup& group, ParamUse use, int slot) override;
  void gradients_ready(Context& ctx, const ParamGroup& group, int slot, bool last_of_step) override;

 private:
  // Sums the gradients of `params` that are replicated under sequence parallelism (and, in every
  // layout, --qk-layernorm's norms) over TP, in one all-reduce through a staging buffer; each
  // parameter once per iteration.
  void reduce_sequence_parallel(Context& ctx, std::span<Param* const> params);
  void tied_embedding_sum(Context& ctx);
  // ZeRO-2: the same two sums over this rank's gradient shards (sums commute with the
  // data-parallel reduce-scatter; the flat layout is the same on every TP rank, and the tied
  // embedding's own bucket is the same on both stages).
  void sequence_parallel_sum_of_shards(Context& ctx);
  void tied_embedding_sum_of_shards(Context& ctx);
  // The buckets holding the group's parameters, each once (listed by attach: the hooks run per
  // layer and microbatch and allocate nothing).
  const std::vector<int>& buckets_of(const ParamGroup& group) const { return links_.at(&group).buckets; }

  ProcessGrid& grid_;
  ParamStore& params_;
  const TensorParallel& tp_;
  bool distributed_optimizer_, overlap_grad_reduce_, overlap_param_gather_;
  bool tied_across_stages_;
  std::unique_ptr<GradientSync> grads_;
  std::unique_ptr<ParamGather> gather_;
  std::unique_ptr<GradientShards> shards_;  // ZeRO-2 and 3
  std::unique_ptr<ParamUnits> units_;       // ZeRO-3
  struct GroupLinks {
    // ZeRO-3 prefetch: the group's neighbours in its chunk, [0] the one before, [1] the one after.
    std::array<const ParamGroup*, 2> neighbours;
    std::vector<int> buckets;  // see buckets_of
  };
  std::map<const ParamGroup*, GroupLinks> links_;
  std::vector<int> writers_;                // [bucket] groups writing its gradients per microbatch (ZeRO-2)
  std::vector<int> written_;                // [bucket] of those, the ones done in this round
  int64_t gradient_buffer_bytes_ = 0;
  int64_t parameter_buffer_bytes_ = 0;
  std::map<const Param*, int> bucket_of_;
  std::map<const Param*, int> expected_reports_, reports_;
  std::vector<int> unready_;  // [bucket] parameters whose gradient is not final yet
  // The parameters summed over TP (summed_over_tensor_parallel), in flat order; ZeRO-2/3: their
  // pieces in this rank's gradient shards; [parameter index] summed this iteration; the scratch
  // list of one call.
  std::vector<Param*> tensor_parallel_summed_;
  std::vector<Range> tensor_parallel_pieces_;
  std::vector<char> tensor_parallel_reduced_;
  std::vector<Param*> tensor_parallel_pending_;
  int tied_bucket_ = -1;
  bool tied_summed_ = false;
  Tensor staging_;  // float32, for the coalesced all-reduces over TP (reduce_sequence_parallel)
};

}  // namespace gpt
