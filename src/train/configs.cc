#include "train/configs.h"

#include <string>
#include <vector>

#include "core/check.h"
#include "core/cuda_runtime.h"
#include "core/memory.h"
#include "train/args/context_parallel_arguments.h"
#include "train/args/flag_enums.h"
#include "train/args/model_arguments.h"
#include "train/args/moe_arguments.h"
#include "train/args/moe_layer_pattern.h"
#include "train/pipeline_split.h"
#include "train/args/sharding_arguments.h"

namespace gpt {
namespace {

bool tied_across_stages(const Arguments& args) {
  // ZB-V's V puts the first and the last virtual stage on rank 0, which holds one word embedding.
  return args.pipeline_model_parallel_size > 1 && !args.untie_embeddings_and_output_weights &&
         pipeline::schedule_placement(pipeline_schedule_kind(args)) == pipeline::Placement::kLoop;
}

// --attention-backend: cuDNN's fused attention where it applies (auto, flash, fused), or always the
// exact reference kernel (unfused, local).
bool fused_attention(AttentionBackend backend) {
  return backend == AttentionBackend::kAuto || backend == AttentionBackend::kFlash ||
         backend == AttentionBackend::kFused;
}

}  // namespace

absl::Status resolve_device(Arguments& args) {
  const bool gpu_available = cuda_backend_built() && cuda::device_count() > 0;
  if (args.device == "cuda" && !gpu_available) {
    return absl::InvalidArgumentError(cuda_backend_built() ? "--device cuda: no GPU is visible"
                                                           : "--device cuda: this build has no CUDA backend");
  }
  if (args.device == "auto") args.device = gpu_available ? "cuda" : "cpu";
  return absl::OkStatus();
}

void set_model_kinds(const Arguments& a, ModelConfig& c) {
  // Validated arguments (validate_model_family and validate_arguments): num_query_groups resolved,
  // names known, recompute granularity and method "" or one of Megatron's names.
  c.num_query_groups = a.num_query_groups;
  c.position_embedding = position_embedding(a);
  c.normalization = normalization(a);
  c.swiglu = a.swiglu;
  c.add_bias_linear = !a.disable_bias_linear;
  c.add_qkv_bias = a.add_qkv_bias;
  // Megatron's validate_args turns bias_gelu_fusion off without linear biases; unfused, its MLP
  // applies F.gelu, the exact GeLU.
  c.exact_gelu = !a.swiglu && !a.squared_relu && (a.disable_bias_linear || a.no_bias_gelu_fusion);
  c.squared_relu = a.squared_relu;
  c.layernorm_zero_centered_gamma = a.apply_layernorm_1p;
  c.qk_layernorm = a.qk_layernorm;
  c.apply_wd_to_qk_layernorm = a.apply_wd_to_qk_layernorm;
  c.untie_embeddings_and_output_weights = a.untie_embeddings_and_output_weights;
  c.dtype = a.bf16 ? DType::kBFloat16 : a.fp16 ? DType::kFloat16 : DType::kFloat32;
  c.fp8 = fp8_config_from(a);
  c.recompute.granularity = recompute_granularity(a);
  if (c.recompute.granularity == RecomputeGranularity::kFull) {
    c.recompute.method = recompute_method(a);
    c.recompute.num_layers = a.recompute_num_layers;
  }
}

ModelConfig model_config_from(const Arguments& a) {
  ModelConfig c;
  c.num_layers = a.num_layers;
  c.hidden_size = a.hidden_size;
  c.ffn_hidden_size = a.ffn_hidden_size;
  c.num_attention_heads = a.num_attention_heads;
  c.kv_channels = a.kv_channels;
  c.seq_length = a.seq_length;
  c.max_position_embeddings = a.max_position_embeddings;
  c.vocab_size = a.vocab_size;
  c.padded_vocab_size = padded_vocab_size(a.vocab_size, a.make_vocab_size_divisible_by, a.tensor_model_parallel_size);
  c.layernorm_epsilon = static_cast<float>(a.norm_epsilon);
  c.init_method_std = static_cast<float>(a.init_method_std);
  set_model_kinds(a, c);
  c.rotary_dim = c.position_embedding == PositionEmbedding::kRope ? rotary_dimensions(a) : 0;
  c.rotary_base = static_cast<float>(a.rotary_base);
  c.rotary_interleaved = a.rotary_interleaved;
  c.rope_scaling.enabled = a.use_rope_scaling;
  c.rope_scaling.factor = static_cast<float>(a.rope_scaling_factor);
  c.hidden_dropout = static_cast<float>(a.hidden_dropout);
  c.attention_dropout = static_cast<float>(a.attention_dropout);
  c.seed = a.seed;
  c.moe = moe_config_from(a);
  return c;
}

MoeConfig moe_config_from(const Arguments& a) {
  MoeConfig m;
  if (a.num_experts <= 0) return m;
  m.num_experts = a.num_experts;
  m.ffn_hidden_size = a.moe_ffn_hidden_size > 0 ? a.moe_ffn_hidden_size : a.ffn_hidden_size;
  m.moe_layers = moe_layer_pattern(a.moe_layer_freq, a.num_layers).value();  // validated
  m.shared_expert_size = a.moe_shared_expert_intermediate_size;
  m.topk = a.moe_router_topk;
  m.score = router_score(a);
  m.pre_softmax = a.moe_router_pre_softmax;
  m.topk_scaling_factor = a.moe_router_topk_scaling_factor > 0 ? a.moe_router_topk_scaling_factor : 1.0;
  m.router_fp64 = router_dtype(a) == RouterDtype::kFp64;
  m.num_groups = a.moe_router_num_groups;
  m.group_topk = a.moe_router_group_topk;
  m.expert_bias = a.moe_router_enable_expert_bias;
  m.bias_update_rate = a.moe_router_bias_update_rate;
  const std::vector<LoadBalancing> types = load_balancing_types(a);
  for (size_t i = 0; i < types.size(); ++i) {
    if (types[i] == LoadBalancing::kSinkhorn) m.sinkhorn = true;
    if (types[i] == LoadBalancing::kNone || types[i] == LoadBalancing::kSinkhorn) continue;
    m.losses.push_back(MoeLoss{.type = types[i], .coefficient = moe_aux_loss_coefficients(a).value()[i]});
  }
  m.z_loss_coeff = a.moe_z_loss_coeff;
  m.capacity_factor = a.moe_expert_capacity_factor;
  m.drop_policy = token_drop_policy(a);
  m.pad_to_capacity = a.moe_pad_expert_input_to_capacity;
  m.per_layer_logging = a.moe_per_layer_logging;
  m.expert_model_parallel = a.expert_model_parallel_size;
  m.expert_tensor_parallel = a.expert_tensor_parallel_size >= 1 ? a.expert_tensor_parallel_size : 0;
  m.alltoall = token_dispatcher(a) == TokenDispatcher::kAlltoall;
  return m;
}

Fp8Config fp8_config_from(const Arguments& a) {
  Fp8Config c;
  if (a.fp8_format.empty()) return c;
  c.enabled = true;
  c.forward_format = Fp8Format::kE4M3;
  // --fp8-format hybrid: E5M2 output gradients in backward; e4m3: E4M3 everywhere.
  const bool hybrid = parse_flag_enum<Fp8FormatChoice>(a.fp8_format) == Fp8FormatChoice::kHybrid;
  c.backward_format = hybrid ? Fp8Format::kE5M2 : Fp8Format::kE4M3;
  c.recipe = parse_flag_enum<Fp8Recipe>(a.fp8_recipe).value_or(Fp8Recipe::kDelayed);
  c.margin = static_cast<int>(a.fp8_margin);
  c.amax_history_len = static_cast<int>(a.fp8_amax_history_len);
  c.amax_history_max = parse_flag_enum<AmaxComputeAlgo>(a.fp8_amax_compute_algo) == AmaxComputeAlgo::kMax;
  c.weight_gradient = !a.no_fp8_wgrad;
  return c;
}

LrScheduleConfig lr_schedule_config(const Arguments& a) {
  LrScheduleConfig c;
  c.max_lr = a.lr;
  c.min_lr = a.min_lr;
  const bool by_samples = a.train_samples > 0;
  c.decay_steps = by_samples ? (a.lr_decay_samples > 0 ? a.lr_decay_samples : a.train_samples)
                             : a.lr_decay_iters * a.global_batch_size;
  const int64_t warmup = by_samples ? a.lr_warmup_samples : a.lr_warmup_iters * a.global_batch_size;
  c.warmup_steps = a.lr_warmup_fraction >= 0.0 ? a.lr_warmup_fraction * static_cast<double>(c.decay_steps)
                                               : static_cast<double>(warmup);
  c.style = lr_decay_style(a);
  return c;
}

LrScheduleConfig decoupled_lr_schedule_config(const Arguments& a) {
  LrScheduleConfig c = lr_schedule_config(a);
  if (a.decoupled_lr >= 0.0) {
    c.max_lr = a.decoupled_lr;
    if (a.decoupled_min_lr >= 0.0) c.min_lr = a.decoupled_min_lr;
  }
  return c;
}

AdamWConfig adamw_config_from(const Arguments& a) {
  return AdamWConfig{.beta1 = static_cast<float>(a.adam_beta1),
                     .beta2 = static_cast<float>(a.adam_beta2),
                     .epsilon = static_cast<float>(a.adam_eps),
                     .weight_decay = static_cast<float>(a.weight_decay),
                     .offload_fraction = offload_fraction(a),
                     .overlap_host_copies = a.overlap_cpu_optimizer_d2h_h2d};
}

KernelOptions kernel_options_from(const Arguments& a) {
  return {.deterministic = a.deterministic_mode, .fused_attention = fused_attention(attention_backend(a))};
}

PipelineLayout pipeline_layout(const Arguments& args, const GridShape& shape, const GridCoordinates& coordinates,
                               int64_t microbatches) {
  PipelineLayout layout;
  layout.pipeline_size = shape.pipeline;
  layout.pipeline_rank = coordinates.pipeline;
  layout.virtual_size = virtual_pipeline_size(args);
  layout.microbatches = microbatches;
  // Only the interleaved order groups microbatches; there the group is validated to be at most the
  // number of microbatches (an int). Without model chunks any value is accepted and unused.
  if (layout.virtual_size > 1) layout.microbatch_group = static_cast<int>(args.microbatch_group_size_per_vp_stage);
  layout.schedule = pipeline_schedule_kind(args);
  layout.placement = pipeline::schedule_placement(layout.schedule);
  const int64_t stages = static_cast<int64_t>(layout.pipeline_size) * layout.virtual_size;
  // Virtual stage k holds layers [first[k], first[k] + layers[k]): the stages in order, each its
  // share of the split (train/pipeline_split.h).
  const std::vector<int64_t> layers = virtual_stage_layers(args);
  GPT_CHECK_EQ(static_cast<int64_t>(layers.size()), stages) << "layers per virtual stage";
  std::vector<int64_t> first(layers.size(), 0);
  for (size_t k = 1; k < layers.size(); ++k) first[k] = first[k - 1] + layers[k - 1];
  for (int c = 0; c < layout.virtual_size; ++c) {
    const int64_t stage = layout.stages().stage(c);
    layout.chunks.push_back({.first_layer = first[static_cast<size_t>(stage)],
                             .num_layers = layers[static_cast<size_t>(stage)],
                             .has_embedding = stage == 0,
                             .has_output = stage == stages - 1,
                             .tied_head = !args.untie_embeddings_and_output_weights});
  }
  return layout;
}

ContextParallel context_parallel_from(const Arguments& args, ProcessGrid& grid) {
  ContextParallel context;
  if (grid.shape().context == 1) return context;
  context.group = &grid.context();
  context.comm_types = cp_comm_types(args);
  if (grid.has_context_levels()) {
    context.inner = &grid.context_inner();
    context.outer = &grid.context_outer();
  }
  return context;
}

ExpertParallel expert_parallel_from(const ModelConfig& config, ProcessGrid& grid) {
  if (!config.moe.enabled()) return ExpertParallel{};
  const ExpertCoordinates& c = grid.expert_coordinates();
  return ExpertParallel{.exchange = config.moe.exchanges_tokens(grid.shape().tensor) ? &grid.expert_exchange() : nullptr,
                        .tensor_rank = c.tensor,
                        .model_rank = c.model};
}

GridShape grid_shape_from(const Arguments& a, int64_t world_size) {
  return GridShape{.tensor = static_cast<int>(a.tensor_model_parallel_size),
                   .pipeline = static_cast<int>(a.pipeline_model_parallel_size),
                   .data = static_cast<int>(data_parallel_size(a, world_size)),
                   .context = static_cast<int>(a.context_parallel_size),
                   .order = a.use_tp_pp_dp_mapping ? RankOrder::kTpCpPpDp : RankOrder::kTpCpDpPp,
                   .optimizer_instances = static_cast<int>(a.num_distributed_optimizer_instances),
                   .context_inner = static_cast<int>(context_inner_size(a)),
                   .expert_model = static_cast<int>(a.expert_model_parallel_size),
                   .expert_tensor = a.num_experts > 0 && a.expert_tensor_parallel_size >= 1
                                        ? static_cast<int>(a.expert_tensor_parallel_size)
                                        : 0,
                   .expert_layers = a.num_experts > 0};
}

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
  // Routed experts (EP-DESIGN.md): sliced over the expert tensor-parallel group; apart from the
  // dense parameters, reduced and sharded over the expert data-parallel group, unless the expert
  // groups are the dense ones.
  const ExpertCoordinates expert = expert_coordinates(shape, grid_rank(shape, coordinates));
  config.expert_tensor_parallel_rank = expert.tensor;
  config.expert_tensor_parallel_size = shape.expert_tensor_size();
  config.separate_experts = !shape.expert_groups_are_dense();
  config.expert_data_parallel_rank = config.separate_experts ? expert.data : 0;
  config.expert_data_parallel_size = config.separate_experts ? shape.expert_data_size() : 1;
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

ExpertShare expert_share_from(const GridShape& shape, const GridCoordinates& coordinates) {
  return {expert_coordinates(shape, grid_rank(shape, coordinates)).model, shape.expert_model};
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


}  // namespace gpt
