#include "train/data_parallel.h"

#include <algorithm>

#include "absl/strings/str_format.h"
#include "core/check.h"
#include "kernels/ops.h"
#include "train/sharding_arguments.h"

namespace gpt {
namespace {

bool tied_across_stages(const Arguments& args) {
  // ZB-V's V puts the first and the last virtual stage on rank 0, which holds one word embedding.
  return args.pipeline_model_parallel_size > 1 && !args.untie_embeddings_and_output_weights &&
         pipeline::schedule_placement(pipeline_schedule_kind(args)) == pipeline::Placement::kLoop;
}

// Replicated parameters whose gradient each TP rank computes from part of the work, summed over
// TP before the data-parallel reduction: those fed by the sequence-split stream under sequence
// parallelism, and --qk-layernorm's norms (each rank normalizes only its heads) in every layout.
bool summed_over_tensor_parallel(const ParamSpec& spec, const TensorParallel& tp) {
  if (tp.size() == 1) return false;
  return spec.tensor_parallel_grad || (tp.sequence_parallel() && spec.sequence_parallel_grad);
}

}  // namespace

ShardPlanConfig shard_plan_config_from(const Arguments& args, const GridShape& shape,
                                       const GridCoordinates& coordinates) {
  // Gradients are reduced, and ZeRO shards laid out, over the data x context group (Megatron's
  // dp-cp group; process_grid.h): its rank is cp + CP * dp. With several distributed-optimizer
  // instances the shards are laid out over this rank's instance: its consecutive DP x CP / N
  // members, the rank's place in it (cp + CP * dp) mod that size.
  const int data_context = shape.data * shape.context;
  const int instance = static_cast<int>(optimizer_instance_size(args, data_context));
  ShardPlanConfig config{.tensor_parallel_rank = coordinates.tensor,
                         .tensor_parallel_size = shape.tensor,
                         .data_parallel_rank = (coordinates.context + shape.context * coordinates.data) % instance,
                         .data_parallel_size = instance,
                         .distributed_optimizer = shards_optimizer(args),
                         .first_pipeline_stage = coordinates.pipeline == 0};
  if (args.use_megatron_fsdp || args.use_torch_fsdp2) {
    // Megatron-FSDP's units on every stage: a layer, the embedding, the output layer, merged up
    // to --suggested-communication-unit-size (FSDP2: each alone, as fully_shard wraps them).
    config.unit_buckets = true;
    config.bucket_size = args.use_torch_fsdp2 ? 0 : args.suggested_communication_unit_size;
    config.shard_gradients = zero_level(args) >= ZeroLevel::kGradients;
    config.shard_parameters = zero_level(args) >= ZeroLevel::kParameters;
  } else if (args.overlap_grad_reduce && coordinates.pipeline == 0) {
    config.bucket_size = ddp_bucket_elements(args, int64_t{shape.data} * shape.context);
  }
  if (tied_across_stages(args)) config.own_bucket.push_back(kWordEmbeddingName);
  return config;
}

DataParallelConfig data_parallel_config_from(const Arguments& args) {
  // FSDP2 prefetches the next unit's all-gather by default (its implicit forward prefetch).
  const bool prefetch = args.overlap_param_gather || args.use_torch_fsdp2;
  return {.overlap_grad_reduce = args.overlap_grad_reduce,
          .overlap_param_gather = prefetch,
          .tied_across_stages = tied_across_stages(args),
          .gradient_buffers = args.overlap_grad_reduce || args.fsdp_double_buffer ? 3 : 2,
          .parameter_buffers = prefetch || args.fsdp_double_buffer ? 3 : 2};
}

DataParallel::DataParallel(const DataParallelConfig& config, ProcessGrid& grid, ParamStore& params,
                           const TensorParallel& tp, Arena& arena)
    : grid_(grid),
      params_(params),
      tp_(tp),
      distributed_optimizer_(params.plan().config().distributed_optimizer),
      overlap_grad_reduce_(config.overlap_grad_reduce),
      overlap_param_gather_(config.overlap_param_gather),
      tied_across_stages_(config.tied_across_stages) {
  const ShardPlan& plan = params.plan();
  for (const Param& param : params.params()) {
    bucket_of_[&param] = param.placement->bucket;
    if (param.name() == kWordEmbeddingName && tied_across_stages_) tied_bucket_ = param.placement->bucket;
  }
  unready_.assign(plan.buckets().size(), 0);
  // The distributed optimizer shards over this rank's instance (the whole data x context group
  // with one instance, and always without the distributed optimizer).
  Communicator& shard_group = distributed_optimizer_ ? grid.optimizer_instance() : grid.data_context();
  GPT_CHECK_EQ(plan.config().data_parallel_size, shard_group.size()) << "shard plan for another data-parallel size";
  GPT_CHECK_EQ(plan.config().data_parallel_rank, shard_group.rank()) << "shard plan of another data-parallel rank";
  GPT_CHECK(grid.across_optimizer_instances().size() == 1 || !(plan.sharded_gradients() || plan.sharded_parameters()))
      << "distributed-optimizer instances with ZeRO-2/3 (hybrid sharding) are refused by the arguments";
  if (plan.sharded_gradients()) {
    const size_t before = arena.used_bytes();
    auto point_grads = [&params](int bucket, const Tensor& buffer) { params.set_bucket_grads(bucket, buffer); };
    shards_ = std::make_unique<GradientShards>(grid.data_context(), params.gradient_storage(), plan.bucket_shards(),
                                               config.gradient_buffers, config.overlap_grad_reduce, point_grads, arena);
    gradient_buffer_bytes_ = static_cast<int64_t>(arena.used_bytes() - before);
  } else {
    grads_ = std::make_unique<GradientSync>(
        shard_group, params.flat_grads(), plan.bucket_shards(),
        distributed_optimizer_ ? GradientReduction::kReduceScatter : GradientReduction::kAllReduce, arena,
        &grid.across_optimizer_instances());
  }
  if (plan.sharded_parameters()) {
    const size_t before = arena.used_bytes();
    auto point_values = [&params](int bucket, const Tensor& buffer) { params.set_bucket_values(bucket, buffer); };
    units_ = std::make_unique<ParamUnits>(grid.data_context(), params.value_storage(), plan.bucket_shards(),
                                          config.parameter_buffers, point_values, arena);
    parameter_buffer_bytes_ = static_cast<int64_t>(arena.used_bytes() - before);
  } else if (distributed_optimizer_) {
    gather_ = std::make_unique<ParamGather>(shard_group, params.flat_values(), plan.bucket_shards(), arena);
  }
  // The parameters summed over TP, and (ZeRO-2/3) their pieces in this rank's gradient shards:
  // fixed by the plan, so listed once rather than at every step.
  int64_t tensor_parallel_sum_elements = 0;
  for (Param& param : params.params()) {
    if (!summed_over_tensor_parallel(*param.spec, tp)) continue;
    tensor_parallel_summed_.push_back(&param);
    tensor_parallel_sum_elements += param.numel();
    for (const Range& shard : plan.owned()) {
      const Range mine = params.range_of(param).intersect(shard);
      if (!mine.empty()) tensor_parallel_pieces_.push_back(mine);
    }
  }
  if (tensor_parallel_sum_elements > 0) staging_ = arena.allocate(DType::kFloat32, {tensor_parallel_sum_elements});
  tensor_parallel_reduced_.assign(params.params().size(), 0);
  tensor_parallel_pending_.reserve(tensor_parallel_summed_.size());
}

void DataParallel::attach(std::span<GptModel* const> chunks) {
  expected_reports_.clear();
  writers_.assign(params_.plan().buckets().size(), 0);
  written_.assign(writers_.size(), 0);
  links_.clear();
  for (GptModel* chunk : chunks) {
    const std::vector<ParamGroup>& groups = chunk->parameter_groups();
    for (size_t i = 0; i < groups.size(); ++i) {
      GroupLinks& links = links_[&groups[i]];
      links.neighbours = {i > 0 ? &groups[i - 1] : nullptr, i + 1 < groups.size() ? &groups[i + 1] : nullptr};
      for (const Param* param : groups[i].params) {
        const int bucket = param->placement->bucket;
        if (std::find(links.buckets.begin(), links.buckets.end(), bucket) == links.buckets.end()) {
          links.buckets.push_back(bucket);
        }
      }
    }
    for (const ParamGroup& group : chunk->parameter_groups()) {
      for (const Param* param : group.params) ++expected_reports_[param];
      for (int bucket : buckets_of(group)) ++writers_[static_cast<size_t>(bucket)];
    }
    if (overlap_grad_reduce_ || overlap_param_gather_ || shards_) chunk->set_observer(this);
  }
  for (const Param& param : params_.params()) {
    GPT_CHECK(expected_reports_.count(&param)) << param.name() << " belongs to no layer of this rank's chunks";
  }
}

std::vector<Range> DataParallel::owned() const {
  if (!distributed_optimizer_) return {};
  return params_.plan().owned();
}

void DataParallel::start_iteration(Context& ctx) {
  if (units_) units_->invalidate(ctx);  // parameters may have been loaded since the last use
  std::fill(written_.begin(), written_.end(), 0);
  reports_.clear();
  std::fill(tensor_parallel_reduced_.begin(), tensor_parallel_reduced_.end(), 0);
  tied_summed_ = false;
  std::fill(unready_.begin(), unready_.end(), 0);
  for (const auto& [param, bucket] : bucket_of_) ++unready_[static_cast<size_t>(bucket)];
}

void DataParallel::reduce_sequence_parallel(Context& ctx, std::span<Param* const> params) {
  std::vector<Param*>& pending = tensor_parallel_pending_;  // capacity kept: no allocation per call
  pending.clear();
  int64_t elements = 0;
  for (Param* param : params) {
    if (!summed_over_tensor_parallel(*param->spec, tp_)) continue;
    const size_t index = static_cast<size_t>(param - params_.params().data());
    GPT_CHECK_LT(index, tensor_parallel_reduced_.size()) << param->name() << " is not a parameter of this store";
    if (tensor_parallel_reduced_[index]) continue;
    tensor_parallel_reduced_[index] = 1;
    pending.push_back(param);
    elements += param->numel();
  }
  if (pending.empty()) return;
  int64_t offset = 0;
  for (Param* param : pending) {
    ops::copy(ctx, staging_.flat_range(offset, param->numel()), param->grad.flat_range(0, param->numel()));
    offset += param->numel();
  }
  tp_.group().all_reduce(ctx, staging_.flat_range(0, elements), ReduceOp::kSum);
  offset = 0;
  for (Param* param : pending) {
    ops::copy(ctx, param->grad.flat_range(0, param->numel()), staging_.flat_range(offset, param->numel()));
    offset += param->numel();
  }
}

void DataParallel::tied_embedding_sum(Context& ctx) {
  // The two copies of the tied word embedding take the sum of their gradients, so that they stay
  // equal: before the data-parallel reduction of its bucket (which never starts earlier).
  if (tied_summed_ || !tied_across_stages_ || grid_.embedding().size() == 1) return;
  tied_summed_ = true;
  grid_.embedding().all_reduce(ctx, params_.get(kWordEmbeddingName).grad, ReduceOp::kSum);
}

void DataParallel::gradients_ready(Context& ctx, const ParamGroup& group, int slot, bool last_of_step) {
  if (shards_) {
    for (int bucket : buckets_of(group)) {
      int& written = written_[static_cast<size_t>(bucket)];
      const bool last_writer = ++written == writers_[static_cast<size_t>(bucket)];
      if (last_writer) written = 0;
      shards_->done(ctx, bucket, last_writer);
    }
    shards_->progress();
    return;
  }
  if (!overlap_grad_reduce_ || !last_of_step) return;
  reduce_sequence_parallel(ctx, group.params);
  for (Param* param : group.params) {
    if (++reports_[param] != expected_reports_[param]) continue;
    const int bucket = bucket_of_[param];
    if (--unready_[static_cast<size_t>(bucket)] == 0 && bucket != tied_bucket_) grads_->start(ctx, bucket);
  }
  grads_->progress();
}

double DataParallel::finish_gradients(Context& ctx) {
  if (shards_) {
    const double waited = shards_->finish(ctx);
    sequence_parallel_sum_of_shards(ctx);
    tied_embedding_sum_of_shards(ctx);
    return waited;
  }
  reduce_sequence_parallel(ctx, tensor_parallel_summed_);
  tied_embedding_sum(ctx);
  return grads_->finish(ctx);
}

void DataParallel::after_step(Context& ctx) {
  if (units_) units_->invalidate(ctx);  // the next use gathers the updated shards
  if (!gather_ || grid_.optimizer_instance().size() == 1) return;
  gather_->start(ctx);
  if (!overlap_param_gather_) gather_->wait_all(ctx);
}

void DataParallel::settle(Context& ctx) {
  if (gather_) gather_->wait_all(ctx);
}

void DataParallel::sequence_parallel_sum_of_shards(Context& ctx) {
  const std::vector<Range>& pieces = tensor_parallel_pieces_;
  int64_t elements = 0;
  for (const Range& piece : pieces) elements += piece.size();
  if (elements == 0) return;
  int64_t offset = 0;
  for (const Range& piece : pieces) {
    ops::copy(ctx, staging_.flat_range(offset, piece.size()), params_.grads_in(piece));
    offset += piece.size();
  }
  tp_.group().all_reduce(ctx, staging_.flat_range(0, elements), ReduceOp::kSum);
  offset = 0;
  for (const Range& piece : pieces) {
    ops::copy(ctx, params_.grads_in(piece), staging_.flat_range(offset, piece.size()));
    offset += piece.size();
  }
}

void DataParallel::tied_embedding_sum_of_shards(Context& ctx) {
  if (!tied_across_stages_ || grid_.embedding().size() == 1) return;
  const Param& word = params_.get(kWordEmbeddingName);
  for (const Range& shard : params_.plan().owned()) {
    const Range mine = params_.range_of(word).intersect(shard);
    if (!mine.empty()) grid_.embedding().all_reduce(ctx, params_.grads_in(mine), ReduceOp::kSum);
  }
}

void DataParallel::before_use(Context& ctx, const ParamGroup& group, ParamUse use, int slot) {
  if (units_) {
    for (int bucket : buckets_of(group)) units_->acquire(ctx, bucket);
    const ParamGroup* next = links_.at(&group).neighbours[use == ParamUse::kBackward ? 0 : 1];
    if (overlap_param_gather_ && next) {
      for (int bucket : buckets_of(*next)) units_->prefetch(ctx, bucket);
    }
  }
  if (shards_ && use == ParamUse::kBackward) {
    for (int bucket : buckets_of(group)) shards_->take(ctx, bucket);
  }
  if (use != ParamUse::kForward || !gather_ || !gather_->in_flight()) return;
  for (Param* param : group.params) gather_->wait_for(ctx, bucket_of_[param]);
}

std::string DataParallel::gather_summary(int64_t iterations) const {
  if (!units_ || iterations <= 0) return std::string();
  const ParamUnits::Counters& c = units_->counters();
  const double per = 1.0 / static_cast<double>(iterations);
  // MB as the memory report's: 2^20 bytes.
  const double gathered_mb = static_cast<double>(c.gathered_elements) * dtype_size(params_.dtype()) * per / 1048576.0;
  const int dp = grid_.data_context().size();
  return absl::StrFormat(
      "ZeRO-3 parameter gathers per iteration (rank %d, %lld iterations): %.1f unit gathers (%.1f prefetched), "
      "%.3f MB gathered (%.3f MB of it received from the other %d data-parallel ranks), host waited %.2f ms for them",
      grid_.world_rank(), static_cast<long long>(iterations), static_cast<double>(c.gathers) * per,
      static_cast<double>(c.prefetches) * per, gathered_mb, gathered_mb * (dp - 1) / dp, dp - 1,
      c.wait_seconds * per * 1e3);
}

void DataParallel::after_use(Context& ctx, const ParamGroup& group, ParamUse use, int slot) {
  if (!units_) return;
  for (int bucket : buckets_of(group)) units_->release(bucket);
}

}  // namespace gpt
