// Trainer's set-up (train/trainer.h): the rank's chunks, parameters, data-parallel state and
// optimizer, configured from the flags by train/configs.h, built and checked against the memory
// plan, and the memory figures the start-up report prints.
#include "train/trainer.h"

#include <cmath>
#include <cstdio>
#include <optional>
#include <thread>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/logging.h"
#include "core/memory.h"
#include "core/stream_copy.h"
#include "kernels/attention_backend.h"
#include "kernels/ops.h"
#include "parallel/comm/mpi_runtime.h"
#include "train/args/batch_size_arguments.h"
#include "train/configs.h"
#include "train/data_parallel/make_data_parallel.h"
#include "train/data_setup.h"
#include "train/resilience/fault_injection.h"
#include "train/args/flag_enums.h"
#include "train/fp8_records.h"
#include "train/memory_plan.h"
#include "train/report/memory_report.h"
#include "train/args/sharding_arguments.h"
#include "model/activation_memory.h"

namespace gpt {
namespace {

// The CPU backend with the node's cores shared among its ranks (BLAS threads), or the GPU of this
// rank's node-local index among the visible ones (several ranks may share one GPU with the MPI
// communicator; the launcher refuses that with NCCL).
Context make_context(const Arguments& args) {
  if (args.device == "cuda") return Context::gpu(gpu_for_local_rank(local_rank(), cuda::device_count()));
  const int cores = std::max(1u, std::thread::hardware_concurrency());
  return Context::cpu(std::max(1, cores / local_world_size()));
}
}  // namespace

Trainer::Trainer(const Arguments& args, ProcessGrid& grid)
    : args_(args),
      grid_(grid),
      ctx_(make_context(args)),
      config_(model_config_from(args)),
      specs_(build_param_specs(config_)),
      arena_(ctx_.device(), "model") {}

absl::StatusOr<std::unique_ptr<Trainer>> Trainer::create(const Arguments& given, ProcessGrid& grid) {
  Arguments args = given;
  GPT_RETURN_IF_ERROR(resolve_device(args));
  if (!args.fp8_format.empty() && args.device == "cuda") {
    return absl::InvalidArgumentError(
        "--fp8-format: FP8 GEMMs are emulated on the CPU backend only (--device cpu); the CUDA backend has no FP8 "
        "GEMMs yet");
  }
  if (attention_backend(args) == AttentionBackend::kFused && (args.device != "cuda" || !fused_attention_built())) {
    return absl::InvalidArgumentError(args.device != "cuda"
                                          ? "--attention-backend fused needs the GPU (this run uses the CPU backend)"
                                          : "--attention-backend fused: this build has no cuDNN");
  }
  // How accepted Megatron flags are carried out here (train/args/arguments.h), once.
  if (grid.world_rank() == 0) {
    for (const std::string& note : args.notes) log_line(LogLevel::kInfo, note);
  }
  if (args.device == "cuda" && args.attention_dropout > 0.0 && grid.world_rank() == 0) {
    // cuDNN's fused attention draws its own dropout masks, which would differ between layouts.
    GPT_LOG_WARNING() << "--attention-dropout " << args.attention_dropout
                      << " runs the exact (unfused, slower) attention kernels on the GPU so that every layout "
                         "drops the same probabilities; --attention-dropout 0 keeps cuDNN's fused attention";
  }
  // The data first: its tokenizer fixes the vocabulary, and a missing or damaged dataset is
  // reported before any model memory is taken.
  GPT_ASSIGN_OR_RETURN(DataSources data, build_data_sources(args));
  args.vocab_size = data.vocab_size;
  std::unique_ptr<Trainer> t(new Trainer(args, grid));
  t->ctx_.set_options(kernel_options_from(args));
  t->train_data_ = data.train;
  t->valid_data_ = data.valid;
  t->test_data_ = data.test;
  const GridShape& shape = grid.shape();
  if (args.distributed_backend == "nccl") grid.adopt_nccl(t->ctx_, args.distributed_timeout_minutes * 60.0);
  t->data_parallel_size_ = shape.data;
  // Evaluation's microbatches (--global-batch-size, as Megatron's evaluate), and every number of
  // training microbatches the batch-size schedule can give (a batch that does not divide is refused
  // when reached: check_batch_sizes_reached).
  const int64_t per_microbatch = args.micro_batch_size * shape.data;
  t->batches_ = batch_size_schedule(args);
  t->eval_microbatches_ = args.global_batch_size / per_microbatch;
  std::vector<int64_t> train_microbatches;
  for (int64_t batch : t->batches_.batch_sizes()) {
    if (batch % per_microbatch == 0) train_microbatches.push_back(batch / per_microbatch);
  }
  t->tensor_parallel_ = std::make_unique<TensorParallel>(grid.tensor(), args.sequence_parallel);
  // This rank's chunks, their parameters (one store, so the flat buffers cover every chunk) and
  // the schedules that drive them.
  const PipelineLayout pipeline = pipeline_layout(args, shape, grid.coordinates(), t->eval_microbatches_);
  std::vector<ParamSpec> specs =
      rank_param_specs(t->specs_, pipeline, expert_share_from(shape, grid.coordinates()));
  t->loss_on_first_stage_ = pipeline.placement == pipeline::Placement::kV;
  const size_t params_begin = t->arena_.used_bytes();
  t->params_ = std::make_unique<ParamStore>(
      ShardPlan(std::move(specs), shard_plan_config_from(args, shape, grid.coordinates())), t->config_.dtype,
      t->arena_);
  const size_t params_end = t->arena_.used_bytes();
  t->params_->initialize(static_cast<uint64_t>(args.seed));
  const size_t chunks_begin = t->arena_.used_bytes();
  t->forward_backward_ = std::make_unique<ForwardBackward>(pipeline, train_microbatches);
  t->feed_ = std::make_unique<MicrobatchFeed>(args.micro_batch_size, shape.data, grid.coordinates().data,
                                              t->config_.vocab_size);
  if (t->config_.fp8.enabled) {
    t->fp8_ = std::make_unique<Fp8Scaling>(t->config_.fp8, t->config_.num_layers);
    t->fp8_records_ = std::make_unique<Fp8CheckpointRecords>(*t->fp8_);
    t->add_checkpoint_records(t->fp8_records_.get());
  }
  std::vector<pipeline::Stage*> stages;
  const ContextParallel context = context_parallel_from(args, grid);
  const ExpertParallel experts = expert_parallel_from(t->config_, grid);
  for (size_t c = 0; c < pipeline.chunks.size(); ++c) {
    t->chunks_.push_back(std::make_unique<GptModel>(t->config_, *t->params_, *t->tensor_parallel_,
                                                    args.micro_batch_size, t->forward_backward_->stash_slots()[c],
                                                    pipeline.chunks[c], t->arena_,
                                                    t->forward_backward_->deferral_depths()[c], context,
                                                    t->fp8_.get(), experts));
    t->chunks_.back()->set_moe_data_context(&grid.data_context());
    t->stages_.push_back(std::make_unique<ModelStage>(*t->chunks_.back(), t->config_.dtype, *t->feed_));
    stages.push_back(t->stages_.back().get());
  }
  t->forward_backward_->attach(std::move(stages), t->arena_);
  const size_t chunks_end = t->arena_.used_bytes();
  t->data_parallel_ = make_data_parallel(data_parallel_config_from(args), grid, *t->params_, *t->tensor_parallel_,
                                         t->arena_);
  std::vector<GptModel*> chunks;
  for (auto& chunk : t->chunks_) chunks.push_back(chunk.get());
  t->data_parallel_->attach(chunks);
  const size_t optimizer_begin = t->arena_.used_bytes();
  t->optimizer_ = std::make_unique<AdamW>(t->ctx_, *t->params_, adamw_config_from(args), t->arena_,
                                          t->params_->plan().owned());
  // The memory plan is the memory allocated, item by item, on every rank of every layout.
  const RankMemory planned =
      rank_memory(t->params_->plan(), t->config_, t->chunks_.front()->shapes(), t->tensor_parallel_->sequence_parallel(),
                  pipeline, t->forward_backward_->stash_slots(), t->forward_backward_->deferral_depths(),
                  data_parallel_config_from(args), offload_fraction(args));
  // The store's two buffers, the FP32 gradients (or their shards, ZeRO-2/3) measured by the tensor
  // the arena gave them, and ZeRO-2/3's working gradient and parameter buffers as DataParallel
  // measured them.
  const int64_t gradient_bytes = Arena::aligned_bytes(DType::kFloat32, t->params_->gradient_storage().shape());
  t->allocated_ = {.parameters = static_cast<int64_t>(params_end - params_begin) - gradient_bytes +
                                 t->data_parallel_->parameter_buffer_bytes(),
                   .gradients = gradient_bytes + t->data_parallel_->gradient_buffer_bytes(),
                   .optimizer_state = static_cast<int64_t>(t->arena_.used_bytes() - optimizer_begin),
                   .activations = static_cast<int64_t>(chunks_end - chunks_begin),
                   .data_parallel_buffers = static_cast<int64_t>(optimizer_begin - chunks_end) -
                                            t->data_parallel_->gradient_buffer_bytes() -
                                            t->data_parallel_->parameter_buffer_bytes(),
                   .host_optimizer_state = t->optimizer_->host_bytes_allocated()};
  GPT_CHECK_EQ(planned.parameters, t->allocated_.parameters) << "memory plan of the parameters";
  GPT_CHECK_EQ(planned.gradients, t->allocated_.gradients) << "memory plan of the gradients";
  GPT_CHECK_EQ(planned.activations, t->allocated_.activations) << "memory plan of the chunks";
  GPT_CHECK_EQ(planned.optimizer_state, t->allocated_.optimizer_state) << "memory plan of the optimizer state";
  GPT_CHECK_EQ(planned.data_parallel_buffers, t->allocated_.data_parallel_buffers)
      << "memory plan of the data-parallel buffers";
  GPT_CHECK_EQ(planned.host_optimizer_state, t->allocated_.host_optimizer_state)
      << "memory plan of the offloaded optimizer state";
  t->loss_sum_ = t->arena_.allocate_zeroed(DType::kFloat32, {1});
  t->norm_scratch_ = t->arena_.allocate_zeroed(DType::kFloat32, {1});
  t->zeros_scratch_ = t->arena_.allocate_zeroed(DType::kInt64, {1});
  t->memory_scratch_ = t->arena_.allocate_zeroed(DType::kFloat32, {kMemoryFigureFloats});
  t->timing_scratch_ = t->arena_.allocate_zeroed(DType::kFloat32, {2 * (3 + phase_timer::kPhases)});
  if (t->config_.moe.enabled()) {
    t->moe_scratch_ =
        t->arena_.allocate_zeroed(DType::kFloat32, {t->config_.num_layers * (4 + t->config_.moe.num_experts)});
  }
  t->timing_ = args.timing_log_level >= 1;
  t->phase_clock_ = t->timing_ || args.log_straggler;
  t->rerun_ = RerunCheck::create(t->args_, grid);
  if (t->rerun_) t->add_checkpoint_records(t->rerun_.get());
  phase_timer::set_enabled(args.timing_log_level >= 2);
  t->memory_gathered_ = t->arena_.allocate_zeroed(DType::kFloat32, {kMemoryFigureFloats * grid.world_size()});
  t->memory_ = t->memory_figures(pipeline, static_cast<double>(chunks_end - chunks_begin));
  if (args.timing_log_level >= 2 && !args.metrics_file.empty() && shape.pipeline > 1) {
    // The measured pipeline timeline goes to the metrics file with each log line.
    t->timeline_ = std::make_unique<TimelineGather>(t->forward_backward_->schedule(Pass::kTrain), pipeline.schedule,
                                                    args.num_layers, t->arena_);
    t->forward_backward_->record_timeline(true);
  }
  t->arena_.freeze();
  t->schedule_ = lr_schedule_config(args);  // in samples, from iteration- or sample-based flags
  t->decoupled_schedule_ = decoupled_lr_schedule_config(args);
  t->loss_scaling_ = LossScaling::from_arguments(args);
  if (t->loss_scaling_) t->add_checkpoint_records(t->loss_scaling_.get());
  // After the loss scaler's records: a checkpoint without the scheduler's record derives it from
  // the restored skipped-update count.
  Trainer* trainer = t.get();
  t->scheduler_position_ = std::make_unique<SchedulerPosition>([trainer] { return trainer->scheduler_samples_implied(); });
  t->add_checkpoint_records(t->scheduler_position_.get());
  t->begin_batch();
  return t;
}

RankParameters Trainer::rank_parameters() {
  return {.ctx = ctx_,
          .params = *params_,
          .config = config_,
          .num_chunks = num_chunks(),
          .settle = [this] { synchronize_parameters(); },
          .buffers = [this] {
            std::vector<ShardedTensor> pieces;
            for (auto& chunk : chunks_) {
              for (ShardedTensor& piece : chunk->buffer_pieces(ctx_)) pieces.push_back(std::move(piece));
            }
            return pieces;
          }};
}

CheckpointedState Trainer::checkpointed_state() {
  return {.parameters = rank_parameters(), .optimizer = *optimizer_, .progress = *this, .records = record_owners_};
}

int64_t Trainer::parameters_on_rank() const {
  int64_t total = 0;
  for (const Param& param : params_->params()) total += param.numel();
  return total;
}

Trainer::~Trainer() {
  // Parameter gathers still in flight (--overlap-param-gather) finish before the buffers go.
  if (data_parallel_) data_parallel_->settle(ctx_);
}

MemoryFigures Trainer::memory_figures(const PipelineLayout& pipeline, double chunk_bytes) const {
  MemoryFigures f;
  // Expert parameters laid out apart are sharded over the expert data-parallel group instead.
  int64_t elements = 0, expert_elements = 0;
  for (const Param& param : params_->params()) {
    elements += param.numel();
    if (param.placement->domain == ParamDomain::kExpert) expert_elements += param.numel();
  }
  const double dense = static_cast<double>(elements - expert_elements), experts = static_cast<double>(expert_elements);
  const double owned = data_parallel_->distributed_optimizer()
                           ? dense / static_cast<double>(grid_.optimizer_instance().size()) +
                                 experts / static_cast<double>(grid_.expert_data().size())
                           : static_cast<double>(elements);
  const bool separate_master = optimizer_->has_separate_master();
  // In theory the memory plan's items (memory_items.h) of this rank's elements: ZeRO-2/3 hold the
  // shards (1/DP); offloaded, the first fraction of the owned elements' state is in host memory.
  const StateLayout layout{.parameter_bytes = static_cast<int64_t>(dtype_size(config_.dtype)),
                           .sharded_parameters = params_->sharded_parameters(),
                           .sharded_gradients = params_->sharded_gradients(),
                           .separate_master = separate_master};
  const double offloaded = offload_fraction(args_);
  const StateMemory<double> ideal = state_memory<double>(layout, static_cast<double>(elements), owned,
                                                         owned * (1.0 - offloaded), owned * offloaded);
  f.theoretical[MemoryFigures::kParameters] = ideal.parameters;
  f.theoretical[MemoryFigures::kGradients] = ideal.gradients;
  f.theoretical[MemoryFigures::kMasterWeights] = ideal.master_weights;
  f.theoretical[MemoryFigures::kMoments] = ideal.moments;
  f.theoretical[MemoryFigures::kHostOptimizer] = ideal.host_optimizer;
  // Allocated: also the working buffers of the units in flight (ZeRO-2/3), as the arena gave them.
  f.allocated[MemoryFigures::kParameters] =
      static_cast<double>(params_->value_storage().bytes() + data_parallel_->parameter_buffer_bytes());
  f.allocated[MemoryFigures::kGradients] =
      static_cast<double>(params_->gradient_storage().bytes() + data_parallel_->gradient_buffer_bytes());
  const double device_elements = static_cast<double>(optimizer_->owned_elements() - optimizer_->host_elements());
  f.allocated[MemoryFigures::kMasterWeights] = separate_master ? device_elements * 4.0 : 0.0;
  f.allocated[MemoryFigures::kMoments] = 2.0 * device_elements * 4.0;
  f.allocated[MemoryFigures::kHostOptimizer] = static_cast<double>(optimizer_->host_bytes_allocated());
  const std::vector<int>& slots = forward_backward_->stash_slots();
  for (size_t c = 0; c < pipeline.chunks.size(); ++c) {
    f.theoretical[MemoryFigures::kActivations] += static_cast<double>(
        activation_memory(config_, grid_.shape().tensor, tensor_parallel_->sequence_parallel(), args_.micro_batch_size,
                          pipeline.chunks[c].num_layers, grid_.shape().context, pipeline.chunks[c].first_layer)
            .total_bytes(slots[c]));
  }
  f.allocated[MemoryFigures::kActivations] = chunk_bytes;  // the chunks' stashes, workspaces and logits
  f.total_allocated = static_cast<double>(arena_.used_bytes());
  return f;
}

}  // namespace gpt
