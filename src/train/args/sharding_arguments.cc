#include "train/args/sharding_arguments.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "train/args/flag_enums.h"
#include "train/args/flag_table.h"

namespace gpt {

using A = Arguments;  // rows are named by field: flag_name(&A::save_interval)

namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

bool shards_optimizer(const Arguments& a);

namespace {

absl::Status validate_offload_arguments(const Arguments& a) {
  if (!(a.optimizer_offload_fraction >= 0.0 && a.optimizer_offload_fraction <= 1.0)) {
    return invalid(absl::StrCat(flag_name(&A::optimizer_offload_fraction), " must be in [0, 1] (got ",
                                a.optimizer_offload_fraction, ")"));
  }
  if (!a.optimizer_cpu_offload) {
    for (absl::string_view flag :
         {flag_name(&A::optimizer_offload_fraction), flag_name(&A::overlap_cpu_optimizer_d2h_h2d)}) {
      if (a.was_given(std::string(flag)))
        return invalid(absl::StrCat(flag, " takes effect only with ", flag_name(&A::optimizer_cpu_offload)));
    }
    return absl::OkStatus();
  }
  if (!shards_optimizer(a)) {
    return invalid(absl::StrCat(flag_name(&A::optimizer_cpu_offload), " needs a distributed optimizer: ",
                                flag_name(&A::use_distributed_optimizer), ", or ", flag_name(&A::use_megatron_fsdp),
                                " with ", flag_name(&A::data_parallel_sharding_strategy),
                                " optim, optim_grads or optim_grads_params"));
  }
  if (!a.use_precision_aware_optimizer) {
    return invalid(absl::StrCat(flag_name(&A::optimizer_cpu_offload), " needs ",
                                flag_name(&A::use_precision_aware_optimizer),
                                " (Megatron's rule: the optimizer "
                                "must hold its master weights itself to move them to the host)"));
  }
  return absl::OkStatus();
}

// Megatron's rules for --use-torch-fsdp2 (megatron/training/arguments.py), with its messages.
absl::Status validate_torch_fsdp2_arguments(const Arguments& a) {
  if (!a.use_torch_fsdp2) return absl::OkStatus();
  if (a.use_megatron_fsdp) {
    return invalid(absl::StrCat(flag_name(&A::use_torch_fsdp2), " and ", flag_name(&A::use_megatron_fsdp),
                                " are two fully sharded data-parallel wrappers: name one"));
  }
  const std::optional<CheckpointFormat> format = parse_flag_enum<CheckpointFormat>(a.ckpt_format);
  const std::pair<bool, std::string> rules[] = {
      {a.pipeline_model_parallel_size > 1,
       absl::StrCat(flag_name(&A::use_torch_fsdp2), " is not supported with pipeline parallelism")},
      {a.use_distributed_optimizer,
       absl::StrCat(flag_name(&A::use_torch_fsdp2), " is not supported with MCore's distributed optimizer")},
      {!a.no_gradient_accumulation_fusion,
       absl::StrCat(flag_name(&A::use_torch_fsdp2), " is not supported with gradient accumulation fusion: add ",
                    flag_name(&A::no_gradient_accumulation_fusion))},
      {format != CheckpointFormat::kTorchDist && format != CheckpointFormat::kTorchDcp,
       absl::StrCat(flag_name(&A::use_torch_fsdp2), " requires ", flag_name(&A::ckpt_format),
                    " torch_dist or torch_dcp")},
      {!a.untie_embeddings_and_output_weights,
       absl::StrCat(flag_name(&A::use_torch_fsdp2), " requires ", flag_name(&A::untie_embeddings_and_output_weights))},
      {a.fp16, absl::StrCat(flag_name(&A::use_torch_fsdp2), " not supported with fp16 yet")},
      {a.check_weight_hash_across_dp_replicas_interval > 0,
       absl::StrCat(flag_name(&A::check_weight_hash_across_dp_replicas_interval),
                    " compares the parameters of data-parallel replicas; under ", flag_name(&A::use_torch_fsdp2),
                    " each data-parallel rank holds another shard of them")},
      {a.test_mode && a.qk_layernorm,
       absl::StrCat(flag_name(&A::test_mode), " compares the q/k layernorm parameters every rank holds; under ",
                    flag_name(&A::use_torch_fsdp2),
                    " each "
                    "data-parallel rank holds another shard of them")},
  };
  for (const auto& [broken, message] : rules) {
    if (broken) return invalid(message);
  }
  return absl::OkStatus();
}

// Megatron-FSDP's precision flags: this program keeps FP32 master weights and FP32 main gradients
// and reduces gradients in FP32, so a value is accepted when it resolves to FP32 (auto: the model's
// compute dtype, FP32 without --bf16 / --fp16).
absl::Status validate_megatron_fsdp_dtypes(const Arguments& a) {
  const std::pair<absl::string_view, const std::string*> flags[] = {
      {flag_name(&A::megatron_fsdp_main_params_dtype), &a.megatron_fsdp_main_params_dtype},
      {flag_name(&A::megatron_fsdp_main_grads_dtype), &a.megatron_fsdp_main_grads_dtype},
      {flag_name(&A::megatron_fsdp_grad_comm_dtype), &a.megatron_fsdp_grad_comm_dtype},
  };
  for (const auto& [flag, value] : flags) {
    const std::optional<FsdpDtype> dtype = parse_flag_enum<FsdpDtype>(*value);
    if (!dtype) {
      return invalid(absl::StrCat(flag, " must be ", names_for_message(flag_enum_names<FsdpDtype>()), " (got '", *value,
                                  "')"));
    }
    if (!a.was_given(std::string(flag))) continue;
    const bool fp32 = *dtype == FsdpDtype::kFp32 || (*dtype == FsdpDtype::kAuto && !a.bf16 && !a.fp16);
    if (!fp32) {
      return invalid(absl::StrCat(flag, " ", *value, ": this program keeps FP32 master weights and FP32 main gradients "
                                  "and reduces gradients in FP32; give fp32"));
    }
  }
  return absl::OkStatus();
}

// Megatron's partial distributed optimizer (DistributedDataParallel: "Partial DistOpt cannot be
// used without DistOpt"). Under Megatron-FSDP the same flag asks for hybrid sharding (HSDP), which
// this program does not build. The divisibility of DP x CP is checked with the world size.
absl::Status validate_optimizer_instances(const Arguments& a) {
  const int64_t n = a.num_distributed_optimizer_instances;
  if (n < 1)
    return invalid(
        absl::StrCat(flag_name(&A::num_distributed_optimizer_instances), " must be at least 1 (got ", n, ")"));
  if (n == 1) return absl::OkStatus();
  if (a.use_megatron_fsdp || a.use_torch_fsdp2) {
    return invalid(absl::StrCat(flag_name(&A::num_distributed_optimizer_instances), " ", n, " with ",
                                a.use_megatron_fsdp ? flag_name(&A::use_megatron_fsdp) : flag_name(&A::use_torch_fsdp2),
                                " asks for hybrid sharding (HSDP), which this program does not build; use ",
                                flag_name(&A::use_distributed_optimizer), " for instances of ZeRO-1"));
  }
  if (!a.use_distributed_optimizer) {
    return invalid(absl::StrCat(flag_name(&A::num_distributed_optimizer_instances), " ", n, " needs ",
                                flag_name(&A::use_distributed_optimizer),
                                " (Megatron: partial DistOpt cannot be used "
                                "without DistOpt)"));
  }
  // Expert parameters are reduced and sharded over the expert data-parallel group
  // (EP-DESIGN.md), which this program does not cut into instances.
  const bool experts_apart = a.num_experts > 0 && (a.expert_model_parallel_size > 1 ||
                                                   (a.expert_tensor_parallel_size >= 1 &&
                                                    a.expert_tensor_parallel_size != a.tensor_model_parallel_size));
  if (experts_apart) {
    return invalid(absl::StrCat(
        flag_name(&A::num_distributed_optimizer_instances), " ", n, " with ", flag_name(&A::expert_model_parallel_size),
        " ", a.expert_model_parallel_size, " and ", flag_name(&A::expert_tensor_parallel_size), " ",
        a.expert_tensor_parallel_size >= 1 ? a.expert_tensor_parallel_size : a.tensor_model_parallel_size,
        ": the expert parameters' optimizer state is sharded over the expert data-parallel group, which this program "
        "does not cut into distributed-optimizer instances; use one instance"));
  }
  return absl::OkStatus();
}

}  // namespace

int64_t ddp_bucket_elements(const Arguments& a, int64_t data_context_size) {
  return a.ddp_bucket_size > 0 ? a.ddp_bucket_size : std::max<int64_t>(40000000, int64_t{1000000} * data_context_size);
}

int64_t optimizer_instance_size(const Arguments& a, int64_t data_context_size) {
  const int64_t n = shards_optimizer(a) ? a.num_distributed_optimizer_instances : 1;
  return data_context_size / n;
}

ZeroLevel zero_level(const Arguments& a) {
  if (a.use_torch_fsdp2) return ZeroLevel::kParameters;
  if (!a.use_megatron_fsdp) return a.use_distributed_optimizer ? ZeroLevel::kOptimizer : ZeroLevel::kNone;
  switch (parse_flag_enum<ShardingStrategy>(a.data_parallel_sharding_strategy)
              .value_or(ShardingStrategy::kOptimGradsParams)) {
    case ShardingStrategy::kNoShard: return ZeroLevel::kNone;
    case ShardingStrategy::kOptim: return ZeroLevel::kOptimizer;
    case ShardingStrategy::kOptimGrads: return ZeroLevel::kGradients;
    case ShardingStrategy::kOptimGradsParams: break;
  }
  return ZeroLevel::kParameters;
}

bool shards_optimizer(const Arguments& a) { return zero_level(a) >= ZeroLevel::kOptimizer; }

double offload_fraction(const Arguments& a) { return a.optimizer_cpu_offload ? a.optimizer_offload_fraction : 0.0; }

absl::Status validate_sharding_arguments(const Arguments& a) {
  GPT_RETURN_IF_ERROR(validate_offload_arguments(a));
  GPT_RETURN_IF_ERROR(validate_torch_fsdp2_arguments(a));
  GPT_RETURN_IF_ERROR(validate_optimizer_instances(a));
  const std::optional<ShardingStrategy> strategy = parse_flag_enum<ShardingStrategy>(a.data_parallel_sharding_strategy);
  if (!strategy) {
    return invalid(absl::StrCat(flag_name(&A::data_parallel_sharding_strategy), " must be ",
                                names_for_message(flag_enum_names<ShardingStrategy>()), " (got '",
                                a.data_parallel_sharding_strategy, "')"));
  }
  const ShardingStrategy s = *strategy;
  GPT_RETURN_IF_ERROR(validate_megatron_fsdp_dtypes(a));
  if (!a.use_megatron_fsdp) {
    // Megatron reads these only under Megatron-FSDP; accepting them alone would train otherwise
    // than the command line says.
    for (absl::string_view flag :
         {flag_name(&A::data_parallel_sharding_strategy), flag_name(&A::suggested_communication_unit_size),
          flag_name(&A::fsdp_double_buffer), flag_name(&A::megatron_fsdp_main_params_dtype),
          flag_name(&A::megatron_fsdp_main_grads_dtype), flag_name(&A::megatron_fsdp_grad_comm_dtype)}) {
      if (a.was_given(std::string(flag))) {
        return invalid(absl::StrCat(flag, " takes effect only with ", flag_name(&A::use_megatron_fsdp),
                                    "; add it, or use ", flag_name(&A::use_distributed_optimizer),
                                    " for ZeRO-1 without it"));
      }
    }
    return absl::OkStatus();
  }
  if (s == ShardingStrategy::kOptimGradsParams && a.test_mode && a.qk_layernorm) {
    return invalid(absl::StrCat(flag_name(&A::test_mode),
                                " compares the q/k layernorm parameters every rank holds; under ",
                                flag_name(&A::data_parallel_sharding_strategy),
                                " optim_grads_params each data-parallel rank holds another shard "
                                "of them"));
  }
  if (s == ShardingStrategy::kOptimGradsParams && a.check_weight_hash_across_dp_replicas_interval > 0) {
    return invalid(absl::StrCat(flag_name(&A::check_weight_hash_across_dp_replicas_interval),
                                " compares the parameters of data-parallel "
                                "replicas; under ",
                                flag_name(&A::data_parallel_sharding_strategy),
                                " optim_grads_params each data-parallel rank "
                                "holds another shard of them, so there are no replicas to compare"));
  }
  if (a.use_distributed_optimizer && s == ShardingStrategy::kNoShard) {
    return invalid(absl::StrCat(flag_name(&A::use_distributed_optimizer), " shards the optimizer state, ",
                                flag_name(&A::data_parallel_sharding_strategy),
                                " no_shard does not: name one level (optim is ZeRO-1)"));
  }
  if (flag_given(a, &A::ddp_bucket_size)) {
    return invalid(absl::StrCat(flag_name(&A::ddp_bucket_size), " sizes DistributedDataParallel's buckets; under ",
                                flag_name(&A::use_megatron_fsdp),
                                " the "
                                "reduction units are sized by ",
                                flag_name(&A::suggested_communication_unit_size)));
  }
  if (flag_given(a, &A::suggested_communication_unit_size) && a.suggested_communication_unit_size <= 0) {
    return invalid(absl::StrCat(flag_name(&A::suggested_communication_unit_size), " must be positive (got ",
                                a.suggested_communication_unit_size, ")"));
  }
  if (a.overlap_param_gather && s == ShardingStrategy::kNoShard) {
    return invalid(absl::StrCat(flag_name(&A::overlap_param_gather),
                                " overlaps the sharded optimizer's parameter all-gather; ",
                                flag_name(&A::data_parallel_sharding_strategy),
                                " no_shard has none (use optim, optim_grads or optim_grads_params)"));
  }
  if ((s == ShardingStrategy::kOptimGrads || s == ShardingStrategy::kOptimGradsParams) &&
      (pipeline_schedule_flag(a) == PipelineScheduleFlag::kZeroBubbleH1 ||
       pipeline_schedule_flag(a) == PipelineScheduleFlag::kZeroBubbleV)) {
    return invalid(absl::StrCat(
        flag_name(&A::data_parallel_sharding_strategy), " ", a.data_parallel_sharding_strategy, " cannot run ",
        flag_name(&A::pipeline_schedule), " ", a.pipeline_schedule,
        ": zero-bubble schedules defer the weight gradients of up to PP microbatches, so every unit's full-size "
        "gradient buffer would stay live (what ZeRO-2 and ZeRO-3 exist to avoid); use 1f1b or interleaved (auto "
        "chooses among those)"));
  }
  return absl::OkStatus();
}

}  // namespace gpt
