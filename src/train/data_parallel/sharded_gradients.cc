#include "train/data_parallel/sharded_gradients.h"

#include "core/check.h"
#include "train/data_parallel/bucket_groups.h"

namespace gpt {
namespace {

// The parts of the parameters summed over TP in this rank's owned ranges, in flat order.
std::vector<Range> owned_parts(const ParamStore& params, const TensorParallel& tp) {
  std::vector<Range> pieces;
  for (const Param* param : tensor_parallel_summed(params, tp)) {
    append_owned_pieces(params.plan(), params.range_of(*param), pieces);
  }
  return pieces;
}

std::unique_ptr<GradientShards> make_shards(const DataParallelConfig& config, ProcessGrid& grid,
                                            ParamStore& params, Arena& arena, int64_t& bytes) {
  GPT_CHECK(params.plan().sharded_gradients()) << "ShardedGradients over a plan without sharded gradients";
  const size_t before = arena.used_bytes();
  auto point_grads = [&params](int bucket, const Tensor& buffer) { params.set_bucket_grads(bucket, buffer); };
  auto shards = std::make_unique<GradientShards>(bucket_groups(params.plan(), grid.data_context(), grid),
                                                 params.gradient_storage(),
                                                 params.plan().bucket_shards(), config.gradient_buffers,
                                                 config.overlap_grad_reduce, point_grads, arena);
  bytes = static_cast<int64_t>(arena.used_bytes() - before);
  return shards;
}

}  // namespace

ShardedGradients::ShardedGradients(const DataParallelConfig& config, ProcessGrid& grid, ParamStore& params,
                                   const TensorParallel& tp, Arena& arena)
    : DataParallel(params.plan()),
      params_(params),
      shards_(make_shards(config, grid, params, arena, gradient_buffer_bytes_)),
      gather_(params.plan().sharded_parameters() ? nullptr
                                                 : std::make_unique<UpdatedShardGather>(
                                                       bucket_groups(params.plan(), grid.optimizer_instance(), grid),
                                                       params, config.overlap_param_gather, arena)),
      tensor_parallel_(tp, params, owned_parts(params, tp), arena),
      tied_(grid, params, config.tied_across_stages, /*in_shards=*/true) {}

void ShardedGradients::build_table(std::span<GptModel* const> chunks) {
  table_ = GroupTable(chunks, params_);
  written_ = BucketReports(table_.writers());
}

void ShardedGradients::attach(std::span<GptModel* const> chunks) {
  build_table(chunks);
  observe(chunks);
}

void ShardedGradients::start_iteration(Context& ctx) {
  written_.clear();
  tensor_parallel_.start_iteration();
  tied_.start_iteration();
}

void ShardedGradients::before_use(Context& ctx, const ParamGroup& group, ParamUse use, int slot) {
  const GroupTable::Row& row = table_.row(group);
  if (use == ParamUse::kBackward) {
    for (int bucket : row.buckets) shards_->take(ctx, bucket);
  }
  if (use == ParamUse::kForward && gather_) gather_->before_forward(ctx, row.buckets);
}

void ShardedGradients::gradients_ready(Context& ctx, const ParamGroup& group, int slot, bool last_of_step) {
  for (int bucket : table_.row(group).buckets) shards_->done(ctx, bucket, written_.report(bucket));
  shards_->progress();
}

double ShardedGradients::finish_gradients(Context& ctx) {
  const double waited = shards_->finish(ctx);
  tensor_parallel_.sum_remaining(ctx);
  tied_.sum(ctx);
  return waited;
}

void ShardedGradients::after_step(Context& ctx) {
  if (gather_) gather_->after_step(ctx);
}

void ShardedGradients::settle(Context& ctx) {
  if (gather_) gather_->settle(ctx);
}

}  // namespace gpt
