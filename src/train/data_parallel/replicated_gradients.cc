#include "train/data_parallel/replicated_gradients.h"

#include "train/data_parallel/bucket_groups.h"

namespace gpt {
namespace {

// A piece (its range) per parameter summed over TP, in flat order.
std::vector<Range> whole_parameters(const ParamStore& params, const TensorParallel& tp) {
  std::vector<Range> pieces;
  for (const Param* param : tensor_parallel_summed(params, tp)) pieces.push_back(params.range_of(*param));
  return pieces;
}

}  // namespace

ReplicatedGradients::ReplicatedGradients(const DataParallelConfig& config, ProcessGrid& grid, ParamStore& params,
                                         const TensorParallel& tp, Arena& arena)
    : DataParallel(params.plan()),
      params_(params),
      tp_(tp),
      overlap_grad_reduce_(config.overlap_grad_reduce),
      overlap_param_gather_(config.overlap_param_gather),
      // The distributed optimizer shards over this rank's instance; its reduce-scatter's result
      // is then all-reduced across the instances. Expert buckets go over the expert data-parallel
      // group (bucket_groups.h).
      grads_(std::make_unique<GradientSync>(
          bucket_groups(params.plan(), distributed_optimizer() ? grid.optimizer_instance() : grid.data_context(), grid),
          params.flat_grads(), params.plan().bucket_shards(),
          distributed_optimizer() ? GradientReduction::kReduceScatter : GradientReduction::kAllReduce, arena,
          &grid.across_optimizer_instances())),
      gather_(distributed_optimizer()
                  ? std::make_unique<UpdatedShardGather>(bucket_groups(params.plan(), grid.optimizer_instance(), grid),
                                                         params, overlap_param_gather_, arena)
                  : nullptr),
      tensor_parallel_(tp, params, whole_parameters(params, tp), arena),
      tied_(grid, params, config.tied_across_stages, /*in_shards=*/false) {
  if (config.tied_across_stages) {
    for (const Param& param : params.params()) {
      if (param.name() == kWordEmbeddingName) tied_bucket_ = param.placement->bucket;
    }
  }
}

void ReplicatedGradients::attach(std::span<GptModel* const> chunks) {
  table_ = GroupTable(chunks, params_);
  ready_ = BucketReports(table_.writers());
  // [parameter] its piece in tensor_parallel_, or -1.
  std::vector<int> piece_of(params_.params().size(), -1);
  int piece = 0;
  for (const Param* param : tensor_parallel_summed(params_, tp_)) {
    piece_of[static_cast<size_t>(param - params_.params().data())] = piece++;
  }
  group_pieces_.assign(static_cast<size_t>(table_.size()), {});
  for (int row = 0; row < table_.size(); ++row) {
    for (int param : table_.row(row).params) {
      const int p = piece_of[static_cast<size_t>(param)];
      if (p >= 0) group_pieces_[static_cast<size_t>(row)].push_back(p);
    }
  }
  if (overlap_grad_reduce_ || overlap_param_gather_) observe(chunks);
}

void ReplicatedGradients::start_iteration(Context& ctx) {
  ready_.clear();
  tensor_parallel_.start_iteration();
  tied_.start_iteration();
}

void ReplicatedGradients::gradients_ready(Context& ctx, const ParamGroup& group, int slot, bool last_of_step) {
  if (!overlap_grad_reduce_ || !last_of_step) return;
  const int row = table_.index(group);
  tensor_parallel_.sum(ctx, group_pieces_[static_cast<size_t>(row)]);
  for (int bucket : table_.row(row).buckets_by_last_param) {
    if (ready_.report(bucket) && bucket != tied_bucket_) grads_->start(ctx, bucket);
  }
  grads_->progress();
}

double ReplicatedGradients::finish_gradients(Context& ctx) {
  tensor_parallel_.sum_remaining(ctx);
  tied_.sum(ctx);
  return grads_->finish(ctx);
}

void ReplicatedGradients::after_step(Context& ctx) {
  if (gather_) gather_->after_step(ctx);
}

void ReplicatedGradients::settle(Context& ctx) {
  if (gather_) gather_->settle(ctx);
}

void ReplicatedGradients::before_use(Context& ctx, const ParamGroup& group, ParamUse use, int slot) {
  if (use == ParamUse::kForward && gather_) gather_->before_forward(ctx, table_.row(group).buckets);
}

}  // namespace gpt
