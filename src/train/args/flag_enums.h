// The string-valued flags that take one of a set of names, each as a C++ enum and its names, once:
// the names are what the flag table's "one of" constraint accepts (train/args/flag_table.h), what the
// accessors below turn into enums for the rest of the program, and what messages and the perf
// model print. A name table lists the names in the enum's order ("" where the flag's default
// means "none").
#pragma once

#include <cstddef>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "model/config.h"
#include "model/context_parallel.h"
#include "model/moe_config.h"
#include "optim/lr_schedule.h"
#include "train/args/arguments.h"

namespace gpt {

// --attention-backend (Megatron's AttnBackend): auto / flash: exact attention (cuDNN's fused
// flash attention where it applies); fused: cuDNN's fused attention only; local / unfused: the
// reference kernel.
enum class AttentionBackend { kAuto, kFlash, kFused, kLocal, kUnfused };
// --data-parallel-sharding-strategy (Megatron-FSDP's ZeRO level, train/args/sharding_arguments.h).
enum class ShardingStrategy { kNoShard, kOptim, kOptimGrads, kOptimGradsParams };

// --rerun-mode (Megatron's RerunMode; train/resilience/rerun_check.h).
enum class RerunMode { kDisabled, kValidateResults, kReportStats };
// --error-injection-type (Megatron's RerunDiagnostic; train/resilience/rerun_error_injector.h).
enum class ErrorInjectionType { kCorrectResult, kTransientError, kPersistentError };
// --fp8-format ("": no FP8): e4m3 for every operand, or hybrid (E5M2 output gradients).
enum class Fp8FormatChoice { kNone, kE4M3, kHybrid };
// --fp8-amax-compute-algo: the delayed recipe's scale from the newest amax or the history's largest.
enum class AmaxComputeAlgo { kMostRecent, kMax };

// --tokenizer-type ("": none, or GPT2BPETokenizer with --vocab-file: resolve_defaults).
enum class TokenizerType { kNone, kGpt2Bpe, kNull, kSentencePiece, kGptSentencePiece, kHuggingFace };
// --ckpt-format: Megatron's formats, each written and read as this program's sharded HDF5.
enum class CheckpointFormat { kTorchDist, kTorch, kTorchDcp, kFsdpDtensor, kHdf5 };
// --transformer-impl: this program's kernels either way.
enum class TransformerImpl { kLocal, kTransformerEngine };
// --distributed-backend ("": NCCL on the GPU, MPI on the CPU; gloo became mpi in resolve_defaults).
enum class DistributedBackend { kDefault, kNccl, kMpi };

// --pipeline-schedule ("": Megatron's for the layout): the schedules of parallel/pipeline that the
// flag names, or auto (the launcher chooses, train/schedule_choice.h).
enum class PipelineScheduleFlag { kDefault, kOneFOneB, kInterleaved, kZeroBubbleH1, kZeroBubbleV, kAuto };

// Megatron-FSDP's precision flags (--megatron-fsdp-main-params-dtype, ...-main-grads-dtype,
// ...-grad-comm-dtype); auto: the model's compute dtype.
enum class FsdpDtype { kFp32, kBf16, kFp16, kAuto };

// The names of an enum's values, in its order.
template <typename E>
struct FlagEnumNames;
template <>
struct FlagEnumNames<ContextCommType> {  // --cp-comm-type
  static constexpr std::string_view kNames[] = {"p2p", "a2a", "a2a+p2p"};
};
template <>
struct FlagEnumNames<PositionEmbedding> {  // --position-embedding-type
  static constexpr std::string_view kNames[] = {"learned_absolute", "rope", "none"};
};
template <>
struct FlagEnumNames<Normalization> {  // --normalization
  static constexpr std::string_view kNames[] = {"LayerNorm", "RMSNorm"};
};
template <>
struct FlagEnumNames<RecomputeGranularity> {  // --recompute-granularity ("": none)
  static constexpr std::string_view kNames[] = {"", "full", "selective"};
};
template <>
struct FlagEnumNames<RecomputeMethod> {  // --recompute-method ("": none)
  static constexpr std::string_view kNames[] = {"", "uniform", "block"};
};
template <>
struct FlagEnumNames<AttentionBackend> {  // --attention-backend
  static constexpr std::string_view kNames[] = {"auto", "flash", "fused", "local", "unfused"};
};
template <>
struct FlagEnumNames<ShardingStrategy> {  // --data-parallel-sharding-strategy
  static constexpr std::string_view kNames[] = {"no_shard", "optim", "optim_grads", "optim_grads_params"};
};
template <>
struct FlagEnumNames<LrDecayStyle> {  // --lr-decay-style
  static constexpr std::string_view kNames[] = {"constant", "linear", "cosine"};
};

template <>
struct FlagEnumNames<RerunMode> {  // --rerun-mode
  static constexpr std::string_view kNames[] = {"disabled", "validate_results", "report_stats"};
};
template <>
struct FlagEnumNames<ErrorInjectionType> {  // --error-injection-type
  static constexpr std::string_view kNames[] = {"correct_result", "transient_error", "persistent_error"};
};
template <>
struct FlagEnumNames<Fp8FormatChoice> {  // --fp8-format ("": none)
  static constexpr std::string_view kNames[] = {"", "e4m3", "hybrid"};
};
template <>
struct FlagEnumNames<Fp8Recipe> {  // --fp8-recipe (model/fp8_scaling.h)
  static constexpr std::string_view kNames[] = {"tensorwise", "delayed"};
};
template <>
struct FlagEnumNames<AmaxComputeAlgo> {  // --fp8-amax-compute-algo
  static constexpr std::string_view kNames[] = {"most_recent", "max"};
};

template <>
struct FlagEnumNames<TokenizerType> {  // --tokenizer-type ("": none)
  static constexpr std::string_view kNames[] = {"",
                                                "GPT2BPETokenizer",
                                                "NullTokenizer",
                                                "SentencePieceTokenizer",
                                                "GPTSentencePieceTokenizer",
                                                "HuggingFaceTokenizer"};
};
template <>
struct FlagEnumNames<CheckpointFormat> {  // --ckpt-format
  static constexpr std::string_view kNames[] = {"torch_dist", "torch", "torch_dcp", "fsdp_dtensor", "hdf5"};
};
template <>
struct FlagEnumNames<TransformerImpl> {  // --transformer-impl
  static constexpr std::string_view kNames[] = {"local", "transformer_engine"};
};
template <>
struct FlagEnumNames<DistributedBackend> {  // --distributed-backend ("": the device's)
  static constexpr std::string_view kNames[] = {"", "nccl", "mpi"};
};

template <>
struct FlagEnumNames<PipelineScheduleFlag> {  // --pipeline-schedule ("": the layout's)
  static constexpr std::string_view kNames[] = {"", "1f1b", "interleaved", "zb-h1", "zb-v", "auto"};
};

template <>
struct FlagEnumNames<FsdpDtype> {  // --megatron-fsdp-*-dtype
  static constexpr std::string_view kNames[] = {"fp32", "bf16", "fp16", "auto"};
};

template <>
struct FlagEnumNames<RouterScore> {  // --moe-router-score-function
  static constexpr std::string_view kNames[] = {"softmax", "sigmoid"};
};
template <>
struct FlagEnumNames<LoadBalancing> {  // --moe-router-load-balancing-type
  static constexpr std::string_view kNames[] = {"aux_loss", "seq_aux_loss", "global_aux_loss", "sinkhorn", "none"};
};
template <>
struct FlagEnumNames<TokenDropPolicy> {  // --moe-token-drop-policy
  static constexpr std::string_view kNames[] = {"probs", "position"};
};
// --moe-token-dispatcher-type: how tokens reach their experts' ranks (the same numbers without
// expert parallelism); flex (DeepEP / HybridEP) is refused.
enum class TokenDispatcher { kAllgather, kAlltoall, kFlex };
template <>
struct FlagEnumNames<TokenDispatcher> {
  static constexpr std::string_view kNames[] = {"allgather", "alltoall", "flex"};
};
// --moe-router-dtype ("": the router in the model's dtype, Megatron's None).
enum class RouterDtype { kNone, kFp32, kFp64 };
template <>
struct FlagEnumNames<RouterDtype> {
  static constexpr std::string_view kNames[] = {"", "fp32", "fp64"};
};

template <typename E>
constexpr std::span<const std::string_view> flag_enum_names() {
  return FlagEnumNames<E>::kNames;
}
template <typename E>
constexpr std::string_view enum_name(E value) {
  return FlagEnumNames<E>::kNames[static_cast<size_t>(value)];
}
// The value named `text`, or nullopt.
template <typename E>
constexpr std::optional<E> parse_flag_enum(std::string_view text) {
  const std::span<const std::string_view> names = flag_enum_names<E>();
  for (size_t i = 0; i < names.size(); ++i) {
    if (names[i] == text) return static_cast<E>(i);
  }
  return std::nullopt;
}
// The names as a message lists them: "a, b or c" (the empty name left out).
std::string names_for_message(std::span<const std::string_view> names);

// The flags' values as enums. For validated arguments (each flag's constraint passed): an
// unknown name is an invariant failure.
std::vector<ContextCommType> cp_comm_types(const Arguments& args);
bool uses_cp_comm_type(const Arguments& args, ContextCommType type);
PositionEmbedding position_embedding(const Arguments& args);
Normalization normalization(const Arguments& args);
RecomputeGranularity recompute_granularity(const Arguments& args);
RecomputeMethod recompute_method(const Arguments& args);
AttentionBackend attention_backend(const Arguments& args);
ShardingStrategy sharding_strategy(const Arguments& args);
LrDecayStyle lr_decay_style(const Arguments& args);
RerunMode rerun_mode(const Arguments& args);
// For any arguments: an unknown name reads as kDefault (validate_schedule_flags refuses it).
PipelineScheduleFlag pipeline_schedule_flag(const Arguments& args);
RouterScore router_score(const Arguments& args);
TokenDropPolicy token_drop_policy(const Arguments& args);
TokenDispatcher token_dispatcher(const Arguments& args);
RouterDtype router_dtype(const Arguments& args);
// Each --moe-router-load-balancing-type value (validated: each name known).
std::vector<LoadBalancing> load_balancing_types(const Arguments& args);

}  // namespace gpt
