#include "train/args/arguments.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <sstream>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/checked_math.h"
#include "data/dataset_split.h"
#include "data/gpt_dataset_builder.h"
#include "parallel/pipeline/schedule.h"
#include "train/args/batch_size_arguments.h"
#include "train/args/checkpoint_arguments.h"
#include "train/args/collective_order_arguments.h"
#include "train/args/context_parallel_arguments.h"
#include "train/args/flag_enums.h"
#include "train/args/flag_table.h"
#include "train/args/megatron_flags.h"
#include "train/args/fp8_arguments.h"
#include "train/args/moe_arguments.h"
#include "train/args/model_arguments.h"
#include "train/args/precision_arguments.h"
#include "train/args/pipeline_arguments.h"
#include "train/pipeline_split.h"
#include "train/args/recompute_arguments.h"
#include "train/args/rerun_arguments.h"
#include "train/args/expert_arguments.h"
#include "train/args/schedule_arguments.h"
#include "train/args/sharding_arguments.h"

namespace gpt {

using A = Arguments;  // rows are named by field: flag_name(&A::save_interval)

namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status require_positive(absl::string_view flag, int64_t value) {
  if (value <= 0) return invalid(absl::StrCat(flag, " must be a positive integer (got ", value, ")"));
  return absl::OkStatus();
}

// Flags that reach the kernels and the optimizer as FP32 must survive the cast: 1e39 would become
// infinity, and a positive 1e-50 would become 0 (an epsilon of 0, an all-zero initialization).
absl::Status require_fp32(absl::string_view flag, double value, bool positive) {
  if (std::fabs(value) > static_cast<double>(std::numeric_limits<float>::max())) {
    return invalid(absl::StrCat(flag, " (", value, ") is beyond the FP32 range (at most 3.4e38)"));
  }
  if (positive && !(static_cast<float>(value) > 0.0f)) {
    return invalid(absl::StrCat(flag, " must be positive and representable in FP32 (got ", value, ")"));
  }
  return absl::OkStatus();
}

// Megatron's collective timeout is a Python timedelta; ours becomes a steady-clock deadline in
// nanoseconds, so it is bounded well inside int64 (a million minutes is 1.9 years).
constexpr double kMaxTimeoutMinutes = 1e6;

// Counts that the run derives from the flags (samples, tokens, schedule steps) and keeps in int64:
// each must fit, or the run would compute a wrapped count (a learning rate of 0, an index of the
// wrong size). Called once the global batch size is known.
absl::Status check_derived_counts(const Arguments& a) {
  const int64_t gbs = a.global_batch_size;
  const std::optional<int64_t> train_samples = checked_multiply(a.train_iters, gbs);
  if (!train_samples) {
    return invalid(absl::StrCat(flag_name(&A::train_iters), " (", a.train_iters, ") x ",
                                flag_name(&A::global_batch_size), " (", gbs,
                                "): the number of training samples overflows a 64-bit count"));
  }
  const std::optional<int64_t> train_tokens = checked_multiply(*train_samples, a.seq_length);
  if (!train_tokens || !checked_add(*train_tokens, 1)) {
    return invalid(absl::StrCat(flag_name(&A::train_iters), " (", a.train_iters, ") x ",
                                flag_name(&A::global_batch_size), " (", gbs, ") x ", flag_name(&A::seq_length), " (",
                                a.seq_length, "): the number of training tokens overflows a 64-bit count"));
  }
  if (!checked_multiply(a.lr_decay_iters, gbs)) {
    return invalid(absl::StrCat(flag_name(&A::lr_decay_iters), " (", a.lr_decay_iters, ") x ",
                                flag_name(&A::global_batch_size), " (", gbs,
                                "): the learning-rate schedule's sample count overflows a 64-bit count"));
  }
  if (!checked_multiply(a.lr_warmup_iters, gbs)) {
    return invalid(absl::StrCat(flag_name(&A::lr_warmup_iters), " (", a.lr_warmup_iters, ") x ",
                                flag_name(&A::global_batch_size), " (", gbs,
                                "): the warmup's sample count overflows a 64-bit count"));
  }
  // Megatron's validation sample count: (train_iters / eval_interval + 1) evaluations.
  const int64_t evaluations = a.train_iters / a.eval_interval + 1;
  const std::optional<int64_t> eval_samples = checked_product(evaluations, a.eval_iters, gbs);
  if (!eval_samples || !checked_multiply(*eval_samples, a.seq_length)) {
    return invalid(absl::StrCat(flag_name(&A::eval_iters), " (", a.eval_iters, ") x ", flag_name(&A::global_batch_size),
                                " (", gbs, ") x ", evaluations, " evaluations (", flag_name(&A::train_iters), " / ",
                                flag_name(&A::eval_interval),
                                " + 1): the number of validation samples "
                                "or tokens overflows a 64-bit count"));
  }
  return absl::OkStatus();
}

// The block of Megatron implementation choices in parse_arguments: each is refused only at a value
// whose Megatron meaning this program cannot carry out.
absl::Status validate_implementation_flags(const Arguments& a) {
  if (a.transformer_impl == "inference_optimized") {
    return invalid(absl::StrCat(flag_name(&A::transformer_impl),
                                " inference_optimized is not available (Megatron's inference-only layers): use "
                                "local or transformer_engine, which both run this program's kernels"));
  }
  if (!parse_flag_enum<TransformerImpl>(a.transformer_impl)) {
    return invalid(absl::StrCat(flag_name(&A::transformer_impl), " must be ",
                                names_for_message(flag_enum_names<TransformerImpl>()), " (got ", a.transformer_impl,
                                ")"));
  }
  const AttentionBackend backend = attention_backend(a);
  if (a.use_flash_attn && (backend == AttentionBackend::kLocal || backend == AttentionBackend::kUnfused)) {
    return invalid(absl::StrCat(flag_name(&A::use_flash_attn), " asks for flash attention, which ",
                                flag_name(&A::attention_backend), " ", a.attention_backend,
                                " turns off: give one of them"));
  }
  GPT_RETURN_IF_ERROR(validate_batch_size_flags(a));
  return absl::OkStatus();
}

// The run's length: in iterations or in samples (Megatron's two ways), exactly one; and --lr.
absl::Status validate_run_length(const Arguments& a) {
  const bool by_samples = flag_given(a, &A::train_samples);
  if (by_samples == flag_given(a, &A::train_iters)) {
    return invalid(by_samples ? absl::StrCat(flag_name(&A::train_iters), " and ", flag_name(&A::train_samples),
                                             " cannot both be given (iteration-based or "
                                             "sample-based training)")
                              : absl::StrCat("missing required flag ", flag_name(&A::train_iters), " (or ",
                                             flag_name(&A::train_samples), ")"));
  }
  GPT_RETURN_IF_ERROR(by_samples ? require_positive(flag_name(&A::train_samples), a.train_samples)
                                 : require_positive(flag_name(&A::train_iters), a.train_iters));
  if (!flag_given(a, &A::lr)) return invalid(absl::StrCat("missing required flag ", flag_name(&A::lr)));
  return absl::OkStatus();
}

// The vocabulary's padding. The vocabulary is known here with NullTokenizer (ids [0, N) plus eod
// N) and --mock-data's --vocab-size; with a vocab file it is checked again once read (the memory
// plan), here only the multiple.
absl::Status validate_vocabulary(const Arguments& a) {
  const std::optional<TokenizerType> tokenizer = parse_flag_enum<TokenizerType>(a.tokenizer_type);
  const std::optional<int64_t> known_vocab = tokenizer == TokenizerType::kNull   ? checked_add(a.vocab_size, 1)
                                             : tokenizer == TokenizerType::kNone ? std::optional<int64_t>(a.vocab_size)
                                                                                 : std::optional<int64_t>(1);
  if (!known_vocab) return invalid(absl::StrCat(flag_name(&A::vocab_size), " (", a.vocab_size, ") is too large"));
  return checked_padded_vocab_size(a, *known_vocab).status();
}

// Logging, the vocabulary's padding and the collective timeout.
absl::Status validate_run_flags(const Arguments& a) {
  GPT_RETURN_IF_ERROR(validate_vocabulary(a));
  if (flag_given(a, &A::tensorboard_dir) && a.tensorboard_dir.empty()) {
    return invalid(absl::StrCat(flag_name(&A::tensorboard_dir), " needs a directory (got an empty one)"));
  }
  if (flag_given(a, &A::metrics_file) && a.metrics_file.empty()) {
    return invalid(absl::StrCat(flag_name(&A::metrics_file), " needs a path (got an empty one)"));
  }
  if (!(a.distributed_timeout_minutes > 0.0) || a.distributed_timeout_minutes > kMaxTimeoutMinutes) {
    return invalid(absl::StrCat(flag_name(&A::distributed_timeout_minutes), " must be positive and at most ",
                                kMaxTimeoutMinutes, " (got ", a.distributed_timeout_minutes, ")"));
  }
  return absl::OkStatus();
}

// The model's shape: the defaults resolve_defaults could not fill, and the sizes' products.
absl::Status validate_model_shape(const Arguments& a) {
  if (a.ffn_hidden_size == 0 && a.swiglu) {
    if (!checked_multiply(8, a.hidden_size)) {
      return invalid(absl::StrCat(flag_name(&A::hidden_size), " (", a.hidden_size, ") is too large: the default ",
                                  flag_name(&A::ffn_hidden_size), " with ", flag_name(&A::swiglu), " overflows"));
    }
    return invalid(absl::StrCat(flag_name(&A::swiglu), ": the default ", flag_name(&A::ffn_hidden_size), " (int(8 x ",
                                flag_name(&A::hidden_size),
                                " / 3 / 64) x 64) is 0 "
                                "for ",
                                flag_name(&A::hidden_size), " ", a.hidden_size, ": give ",
                                flag_name(&A::ffn_hidden_size)));
  }
  if (a.ffn_hidden_size == 0) {
    return invalid(absl::StrCat(flag_name(&A::hidden_size), " (", a.hidden_size, ") is too large: the default ",
                                flag_name(&A::ffn_hidden_size), " (4 x ", flag_name(&A::hidden_size),
                                ") overflows a "
                                "64-bit integer"));
  }
  if (a.kv_channels == 0) {
    return invalid(absl::StrCat(flag_name(&A::hidden_size), " (", a.hidden_size, ") must be divisible by ",
                                flag_name(&A::num_attention_heads), " (", a.num_attention_heads, ")"));
  }
  if (!checked_product(3, a.num_attention_heads, a.kv_channels)) {
    return invalid(absl::StrCat(flag_name(&A::num_attention_heads), " (", a.num_attention_heads, ") x ",
                                flag_name(&A::kv_channels), " (", a.kv_channels,
                                ") is too large: the QKV projection's size overflows a 64-bit integer"));
  }
  if (a.seq_length > a.max_position_embeddings) {
    return invalid(absl::StrCat(flag_name(&A::seq_length), " (", a.seq_length, ") must not exceed ",
                                flag_name(&A::max_position_embeddings), " (", a.max_position_embeddings, ")"));
  }
  GPT_RETURN_IF_ERROR(validate_model_family(a));
  GPT_RETURN_IF_ERROR(validate_fp8(a));
  GPT_RETURN_IF_ERROR(require_fp32(flag_name(&A::init_method_std), a.init_method_std, /*positive=*/true));
  GPT_RETURN_IF_ERROR(require_fp32(flag_name(&A::norm_epsilon), a.norm_epsilon, /*positive=*/true));
  return absl::OkStatus();
}

// Megatron flags that go together.
absl::Status validate_flag_pairs(const Arguments& a) {
  if (a.check_weight_hash_across_dp_replicas_interval < 0) {
    return invalid(absl::StrCat(flag_name(&A::check_weight_hash_across_dp_replicas_interval), " must be > 0 (got ",
                                a.check_weight_hash_across_dp_replicas_interval, ")"));
  }
  if (flag_given(a, &A::wgrad_deferral_limit) && !a.defer_embedding_wgrad_compute) {
    return invalid(
        absl::StrCat(flag_name(&A::wgrad_deferral_limit), " needs ", flag_name(&A::defer_embedding_wgrad_compute)));
  }
  if (a.overlap_param_gather_with_optimizer_step && (!a.use_distributed_optimizer || !a.overlap_param_gather)) {
    return invalid(absl::StrCat(flag_name(&A::overlap_param_gather_with_optimizer_step), " needs ",
                                flag_name(&A::use_distributed_optimizer), " and ", flag_name(&A::overlap_param_gather),
                                " (as in Megatron)"));
  }
  return absl::OkStatus();
}

// The learning rates, in FP32 in the optimizer; the embedding and output layer's own rates.
absl::Status validate_learning_rates(const Arguments& a) {
  GPT_RETURN_IF_ERROR(require_fp32(flag_name(&A::lr), a.lr, /*positive=*/false));
  if (!(a.min_lr >= 0.0) || a.min_lr > a.lr) {
    return invalid(absl::StrCat(flag_name(&A::min_lr), " (", a.min_lr, ") must be between 0 and ", flag_name(&A::lr),
                                " (", a.lr, ")"));
  }
  // -1 (the default) means "not given", as None in Megatron.
  if (flag_given(a, &A::decoupled_lr)) {
    if (!(a.decoupled_lr >= 0.0))
      return invalid(absl::StrCat(flag_name(&A::decoupled_lr), " must be >= 0 (got ", a.decoupled_lr, ")"));
    GPT_RETURN_IF_ERROR(require_fp32(flag_name(&A::decoupled_lr), a.decoupled_lr, /*positive=*/false));
  }
  if (flag_given(a, &A::decoupled_min_lr)) {
    if (!flag_given(a, &A::decoupled_lr)) {
      return invalid(absl::StrCat(flag_name(&A::decoupled_min_lr), " applies only with ", flag_name(&A::decoupled_lr),
                                  " (Megatron ignores it without: the embedding "
                                  "and output layer then follow ",
                                  flag_name(&A::lr), " and ", flag_name(&A::min_lr), ")"));
    }
    if (!(a.decoupled_min_lr >= 0.0) || a.decoupled_min_lr > a.decoupled_lr) {
      return invalid(absl::StrCat(flag_name(&A::decoupled_min_lr), " (", a.decoupled_min_lr, ") must be between 0 and ",
                                  flag_name(&A::decoupled_lr), " (", a.decoupled_lr, ")"));
    }
    GPT_RETURN_IF_ERROR(require_fp32(flag_name(&A::decoupled_min_lr), a.decoupled_min_lr, /*positive=*/false));
  } else if (flag_given(a, &A::decoupled_lr) && a.min_lr > a.decoupled_lr) {
    return invalid(absl::StrCat(flag_name(&A::min_lr), " (", a.min_lr,
                                "), the embedding and output layer's minimum without ", flag_name(&A::decoupled_min_lr),
                                ", must not exceed ", flag_name(&A::decoupled_lr), " (", a.decoupled_lr, ")"));
  }
  return absl::OkStatus();
}

// The schedule's warmup and decay, and the optimizer's hyperparameters.
absl::Status validate_optimizer_flags(const Arguments& a) {
  GPT_RETURN_IF_ERROR(validate_learning_rates(a));
  // The default -1 means "not given"; a negative value typed by the user is an error, not that.
  if (flag_given(a, &A::lr_warmup_fraction) && !(a.lr_warmup_fraction >= 0.0)) {
    return invalid(
        absl::StrCat(flag_name(&A::lr_warmup_fraction), " must be in [0, 1] (got ", a.lr_warmup_fraction, ")"));
  }
  if (a.lr_warmup_fraction > 1.0) {
    return invalid(
        absl::StrCat(flag_name(&A::lr_warmup_fraction), " must be in [0, 1] (got ", a.lr_warmup_fraction, ")"));
  }
  GPT_RETURN_IF_ERROR(validate_schedule_arguments(a));
  const bool decays = lr_decay_style(a) != LrDecayStyle::kConstant;
  if (flag_given(a, &A::train_samples)) {
    const double warmup_samples = a.lr_warmup_fraction >= 0.0 ? a.lr_warmup_fraction * a.lr_decay_samples
                                                              : static_cast<double>(a.lr_warmup_samples);
    if (decays && warmup_samples >= static_cast<double>(a.lr_decay_samples)) {
      return invalid(absl::StrCat(
          "learning-rate warmup (", warmup_samples, " samples) must be shorter than ", flag_name(&A::lr_decay_samples),
          " (", a.lr_decay_samples,
          flag_given(a, &A::lr_decay_samples) ? "" : absl::StrCat(", the default: ", flag_name(&A::train_samples)),
          ")"));
    }
  } else {
    if (a.lr_warmup_fraction >= 0.0 && a.lr_warmup_iters != 0) {
      return invalid(absl::StrCat(flag_name(&A::lr_warmup_fraction), " and ", flag_name(&A::lr_warmup_iters),
                                  " cannot both be given"));
    }
    const double warmup_iters = a.lr_warmup_fraction >= 0.0 ? a.lr_warmup_fraction * a.lr_decay_iters
                                                             : static_cast<double>(a.lr_warmup_iters);
    if (decays && warmup_iters >= static_cast<double>(a.lr_decay_iters)) {
      return invalid(absl::StrCat("learning-rate warmup (", warmup_iters, " iterations) must be shorter than ",
                                  flag_name(&A::lr_decay_iters), " (", a.lr_decay_iters, ")"));
    }
  }
  GPT_RETURN_IF_ERROR(require_fp32(flag_name(&A::weight_decay), a.weight_decay, /*positive=*/false));
  // The betas are FP32 in the optimizer: 1 - 1e-10 would round to 1 there and divide by zero in
  // the bias correction.
  if (!(a.adam_beta1 >= 0.0 && static_cast<float>(a.adam_beta1) < 1.0f)) {
    return invalid(absl::StrCat(flag_name(&A::adam_beta1), " must be in [0, 1) (in FP32; got ", a.adam_beta1, ")"));
  }
  if (!(a.adam_beta2 >= 0.0 && static_cast<float>(a.adam_beta2) < 1.0f)) {
    return invalid(absl::StrCat(flag_name(&A::adam_beta2), " must be in [0, 1) (in FP32; got ", a.adam_beta2, ")"));
  }
  GPT_RETURN_IF_ERROR(require_fp32(flag_name(&A::adam_eps), a.adam_eps, /*positive=*/true));
  return absl::OkStatus();
}

// --attention-backend fused: cuDNN's fused attention, which takes only some models.
absl::Status validate_fused_attention(const Arguments& a) {
  if (attention_backend(a) != AttentionBackend::kFused) return absl::OkStatus();
  if (!a.bf16 && !a.fp16) {
    return invalid(absl::StrCat(flag_name(&A::attention_backend), " fused needs ", flag_name(&A::bf16), " or ",
                                flag_name(&A::fp16), " (cuDNN's fused attention is 16-bit only)"));
  }
  if (a.kv_channels % 8 != 0 || a.kv_channels > 128) {
    return invalid(absl::StrCat(flag_name(&A::attention_backend), " fused needs a head dimension (",
                                flag_name(&A::kv_channels),
                                ") that is a multiple "
                                "of 8 and at most 128 (got ",
                                a.kv_channels, ")"));
  }
  if (a.attention_dropout > 0.0) {
    return invalid(absl::StrCat(flag_name(&A::attention_backend), " fused cannot apply ",
                                flag_name(&A::attention_dropout),
                                " (cuDNN draws its own masks, which "
                                "differ from this program's layout-independent ones): use ",
                                flag_name(&A::attention_dropout), " 0 or ", flag_name(&A::attention_backend), " auto"));
  }
  if (a.num_query_groups != a.num_attention_heads) {
    return invalid(absl::StrCat(flag_name(&A::attention_backend),
                                " fused does not take grouped-query attention in this program yet (cuDNN's "
                                "fused attention runs only with one key/value head per query head): use ",
                                flag_name(&A::attention_backend),
                                " auto, which runs the exact attention kernels"));
  }
  return absl::OkStatus();
}

// Data, tensor, context and sequence parallelism: the rules that do not need the world size.
absl::Status validate_parallel_flags(const Arguments& a) {
  // Data parallelism: Megatron's rules.
  GPT_RETURN_IF_ERROR(validate_sharding_arguments(a));
  if (a.overlap_param_gather && !shards_optimizer(a)) {
    return invalid(absl::StrCat(flag_name(&A::overlap_param_gather), " needs ",
                                flag_name(&A::use_distributed_optimizer),
                                " (it overlaps the distributed "
                                "optimizer's parameter all-gather)"));
  }
  // gloo became mpi in resolve_defaults.
  if (!parse_flag_enum<DistributedBackend>(a.distributed_backend)) {
    return invalid(absl::StrCat(flag_name(&A::distributed_backend), " must be nccl, mpi or gloo (got ",
                                a.distributed_backend, ")"));
  }
  const int64_t tp = a.tensor_model_parallel_size;
  if (a.num_attention_heads % tp != 0) {
    return invalid(absl::StrCat(flag_name(&A::num_attention_heads), " (", a.num_attention_heads,
                                ") must be divisible by ", flag_name(&A::tensor_model_parallel_size), " (", tp, ")"));
  }
  if (a.hidden_size % tp != 0) {
    return invalid(absl::StrCat(flag_name(&A::hidden_size), " (", a.hidden_size, ") must be divisible by ",
                                flag_name(&A::tensor_model_parallel_size), " (", tp, ")"));
  }
  if (a.ffn_hidden_size % tp != 0) {
    return invalid(absl::StrCat(flag_name(&A::ffn_hidden_size), " (", a.ffn_hidden_size, ") must be divisible by ",
                                flag_name(&A::tensor_model_parallel_size), " (", tp, ")"));
  }
  GPT_RETURN_IF_ERROR(validate_context_parallel_arguments(a));
  if (a.sequence_parallel && a.seq_length % tp != 0) {
    return invalid(absl::StrCat(flag_name(&A::seq_length), " (", a.seq_length, ") must be divisible by ",
                                flag_name(&A::tensor_model_parallel_size), " (", tp, ") with ",
                                flag_name(&A::sequence_parallel)));
  }
  return validate_fused_attention(a);
}

}  // namespace

absl::StatusOr<Arguments> parse_arguments(int argc, const char* const* argv) {
  std::vector<std::string> args(argv, argv + argc);
  return parse_arguments(args);
}

absl::StatusOr<Arguments> parse_arguments(const std::vector<std::string>& argv) {
  Arguments a;
  CLI::App app{"Pretrain a GPT model (Megatron-LM compatible flags)", argv.empty() ? "pretrain_gpt" : argv[0]};
  declare_flags(app, a);
  const std::span<const std::string> given(argv.size() > 1 ? argv.data() + 1 : argv.data(),
                                           argv.size() > 1 ? argv.size() - 1 : 0);
  // scripts/megatron_flags.py reads the flag table (docs/MEGATRON_FLAGS.md).
  if (std::find(given.begin(), given.end(), "--megatron-flag-table") != given.end()) {
    return absl::CancelledError(megatron_flag_table());
  }
  // A Megatron flag refused with a reason is named with it, not as an unknown option.
  if (std::optional<std::string> refused = undeclared_refused_flag(given)) return invalid(*refused);

  std::vector<std::string> reversed(argv.size() > 1 ? argv.begin() + 1 : argv.end(), argv.end());
  std::reverse(reversed.begin(), reversed.end());
  try {
    app.parse(reversed);
  } catch (const CLI::CallForHelp&) {
    return absl::CancelledError(app.help());
  } catch (const CLI::ParseError& error) {
    return invalid(error.what());
  }
  for (const CLI::Option* option : app.get_options()) {
    if (option->count() > 0 && !option->get_lnames().empty()) a.given.insert("--" + option->get_lnames().front());
  }
  return a;
}

absl::Status validate_arguments(const Arguments& a) {
  GPT_RETURN_IF_ERROR(check_required_flags(a));
  GPT_RETURN_IF_ERROR(validate_schedule_flags(a));
  GPT_RETURN_IF_ERROR(validate_rerun_arguments(a));
  GPT_RETURN_IF_ERROR(validate_run_length(a));
  GPT_RETURN_IF_ERROR(validate_data_arguments(a));
  GPT_RETURN_IF_ERROR(validate_checkpoint_arguments(a));
  // Each flag's own constraint (positive, >= 0, a range, one of a set), declared on its row.
  GPT_RETURN_IF_ERROR(check_flag_constraints(a));
  GPT_RETURN_IF_ERROR(validate_run_flags(a));
  GPT_RETURN_IF_ERROR(validate_model_arguments(a));
  GPT_RETURN_IF_ERROR(validate_loss_scaling(a));
  GPT_RETURN_IF_ERROR(validate_flag_pairs(a));
  GPT_RETURN_IF_ERROR(validate_recompute_arguments(a));
  GPT_RETURN_IF_ERROR(validate_moe_arguments(a));
  GPT_RETURN_IF_ERROR(validate_implementation_flags(a));
  GPT_RETURN_IF_ERROR(validate_optimizer_flags(a));
  return validate_parallel_flags(a);
}

absl::Status validate_model_arguments(const Arguments& a) {
  GPT_RETURN_IF_ERROR(validate_vocabulary(a));
  return validate_model_shape(a);
}

absl::Status prepare_arguments(Arguments& a) {
  resolve_defaults(a);
  return validate_arguments(a);
}

absl::StatusOr<int64_t> checked_padded_vocab_size(const Arguments& a, int64_t vocab_size) {
  const std::optional<int64_t> multiple =
      checked_multiply(a.make_vocab_size_divisible_by, a.tensor_model_parallel_size);
  if (!multiple) {
    return invalid(absl::StrCat(flag_name(&A::make_vocab_size_divisible_by), " (", a.make_vocab_size_divisible_by,
                                ") x ", flag_name(&A::tensor_model_parallel_size), " (", a.tensor_model_parallel_size,
                                ") overflows a 64-bit integer"));
  }
  const std::optional<int64_t> padded = checked_round_up(vocab_size, *multiple);
  if (!padded) {
    return invalid(absl::StrCat("the vocabulary (", vocab_size, ") padded to a multiple of ",
                                flag_name(&A::make_vocab_size_divisible_by), " (", a.make_vocab_size_divisible_by,
                                ") x ", flag_name(&A::tensor_model_parallel_size), " (", a.tensor_model_parallel_size,
                                ") overflows a 64-bit integer"));
  }
  return *padded;
}

int64_t data_parallel_size(const Arguments& a, int64_t world_size) {
  return world_size / (a.tensor_model_parallel_size * a.context_parallel_size * a.pipeline_model_parallel_size);
}

int virtual_pipeline_size(const Arguments& a) {
  if (a.num_virtual_stages_per_pipeline_rank > 0) return static_cast<int>(a.num_virtual_stages_per_pipeline_rank);
  if (a.num_layers_per_virtual_pipeline_stage > 0) {
    // Megatron divides the layers counting the embedding and the loss where they count as layers.
    return static_cast<int>(pipeline_split_layers(a) /
                            (a.pipeline_model_parallel_size * a.num_layers_per_virtual_pipeline_stage));
  }
  return 1;
}

pipeline::ScheduleKind pipeline_schedule_kind(const Arguments& a) {
  if (a.pipeline_schedule.empty()) return pipeline::default_schedule_kind(virtual_pipeline_size(a));
  GPT_CHECK(pipeline_schedule_flag(a) != PipelineScheduleFlag::kAuto)
      << absl::StrCat(flag_name(&A::pipeline_schedule), " auto used before the launcher chose the schedule");
  absl::StatusOr<pipeline::ScheduleKind> kind = pipeline::parse_schedule_kind(a.pipeline_schedule);
  GPT_CHECK(kind.ok()) << absl::StrCat(flag_name(&A::pipeline_schedule), ": ") << kind.status();
  return *kind;
}

int64_t num_microbatches(const Arguments& a, int64_t world_size) {
  const int64_t per_microbatch = a.micro_batch_size * data_parallel_size(a, world_size);
  int64_t most = a.global_batch_size / per_microbatch;
  if (!a.rampup_batch_size.empty() || flag_given(a, &A::step_batch_size_schedule)) {
    absl::StatusOr<BatchSizeSchedule> batches = batch_size_schedule_for_world(a);
    if (batches.ok()) {
      for (int64_t batch : batches->batch_sizes()) {
        if (batch % per_microbatch == 0) most = std::max(most, batch / per_microbatch);
      }
    }
  }
  return most;
}

namespace {

// TP x PP x CP, or 0 when the product overflows (larger than any world: the divisibility message).
int64_t model_parallel_size(const Arguments& a) {
  return checked_multiply(checked_multiply(a.tensor_model_parallel_size, a.pipeline_model_parallel_size).value_or(0),
                          a.context_parallel_size)
      .value_or(0);
}

}  // namespace

void resolve_world_defaults(Arguments& a, int64_t world_size) {
  const int64_t model_parallel = model_parallel_size(a);
  if (model_parallel == 0 || world_size % model_parallel != 0) return;
  const std::optional<int64_t> batch_per_microbatch = checked_multiply(a.micro_batch_size, world_size / model_parallel);
  if (!batch_per_microbatch) return;
  if (a.global_batch_size == 0) a.global_batch_size = *batch_per_microbatch;
  if (!flag_given(a, &A::train_samples) || a.global_batch_size % *batch_per_microbatch != 0) return;
  // Megatron's update_train_iters: with a constant batch whole global batches only (floor), the
  // samples of a last partial batch are not trained; with a ramp-up or a step schedule its loop.
  const absl::StatusOr<BatchSizeSchedule> batches = batch_size_schedule_for_world(a);
  if (batches.ok()) a.train_iters = batches->iterations_for_samples(a.train_samples);
}

absl::Status prepare_for_world(Arguments& a, int64_t world_size) {
  resolve_world_defaults(a, world_size);
  return validate_for_world(a, world_size);
}

absl::Status validate_for_world(const Arguments& a, int64_t world_size) {
  const int64_t model_parallel = model_parallel_size(a);
  if (model_parallel == 0 || world_size % model_parallel != 0) {
    return invalid(absl::StrCat("world size (", world_size, ") must be divisible by ",
                                flag_name(&A::tensor_model_parallel_size), " (", a.tensor_model_parallel_size, ") x ",
                                flag_name(&A::pipeline_model_parallel_size), " (", a.pipeline_model_parallel_size, ")",
                                a.context_parallel_size > 1 ? absl::StrCat(" x ", flag_name(&A::context_parallel_size),
                                                                           " (", a.context_parallel_size, ")")
                                                            : ""));
  }
  const int64_t dp = world_size / model_parallel;
  GPT_RETURN_IF_ERROR(check_expert_groups(a, world_size, dp));
  // Megatron's parallel_state: "Data parallel size should be divisible by partial DistOpt shard factor".
  if (a.num_distributed_optimizer_instances > 1 &&
      (dp * a.context_parallel_size) % a.num_distributed_optimizer_instances != 0) {
    return invalid(absl::StrCat("data-parallel size (", dp, ")",
                                a.context_parallel_size > 1 ? absl::StrCat(" x ", flag_name(&A::context_parallel_size),
                                                                           " (", a.context_parallel_size, ")")
                                                            : "",
                                " must be divisible by ", flag_name(&A::num_distributed_optimizer_instances), " (",
                                a.num_distributed_optimizer_instances, ")"));
  }
  const std::optional<int64_t> batch_per_microbatch = checked_multiply(a.micro_batch_size, dp);
  if (!batch_per_microbatch) {
    return invalid(absl::StrCat(flag_name(&A::micro_batch_size), " (", a.micro_batch_size, ") x data-parallel size (",
                                dp, ") overflows a 64-bit integer"));
  }
  GPT_CHECK_GT(a.global_batch_size, 0) << "validate_for_world before resolve_world_defaults";
  if (a.global_batch_size % *batch_per_microbatch != 0) {
    return invalid(absl::StrCat(flag_name(&A::global_batch_size), " (", a.global_batch_size, ") must be divisible by ",
                                flag_name(&A::micro_batch_size), " (", a.micro_batch_size, ") x data-parallel size (",
                                dp, ")"));
  }
  GPT_ASSIGN_OR_RETURN(const BatchSizeSchedule batches, batch_size_schedule_for_world(a));
  if (flag_given(a, &A::train_samples)) {
    // resolve_world_defaults set --train-iters from the samples (Megatron's update_train_iters).
    GPT_CHECK_EQ(a.train_iters, batches.iterations_for_samples(a.train_samples))
        << "validate_for_world before resolve_world_defaults";
    if (a.train_iters == 0) {
      return invalid(absl::StrCat(flag_name(&A::train_samples), " (", a.train_samples,
                                  ") is less than one global batch (", a.global_batch_size,
                                  " samples): no iteration to train"));
    }
  }
  // The pipeline layout, before any dataset or buffer exists.
  const int64_t p = a.pipeline_model_parallel_size;
  if (a.num_layers_per_virtual_pipeline_stage > 0 && a.num_virtual_stages_per_pipeline_rank > 0) {
    return invalid(absl::StrCat(flag_name(&A::num_layers_per_virtual_pipeline_stage), " and ",
                                flag_name(&A::num_virtual_stages_per_pipeline_rank),
                                " cannot both "
                                "be given"));
  }
  int64_t layers_per_virtual_stage = a.num_layers_per_virtual_pipeline_stage;
  if (a.num_virtual_stages_per_pipeline_rank > 0) {
    // Overflowing: more stages than any layer count, so the divisibility message.
    const int64_t stages = checked_multiply(p, a.num_virtual_stages_per_pipeline_rank).value_or(0);
    if (p == 1) {
      return invalid(absl::StrCat(flag_name(&A::num_virtual_stages_per_pipeline_rank), " needs ",
                                  flag_name(&A::pipeline_model_parallel_size), " > 1"));
    }
    if (!custom_pipeline_split(a) && (stages == 0 || a.num_layers % stages != 0)) {
      return invalid(absl::StrCat(flag_name(&A::num_layers), " (", a.num_layers, ") must be divisible by ",
                                  flag_name(&A::pipeline_model_parallel_size), " (", p, ") x ",
                                  flag_name(&A::num_virtual_stages_per_pipeline_rank), " (",
                                  a.num_virtual_stages_per_pipeline_rank, ")"));
    }
    layers_per_virtual_stage = stages == 0 ? 0 : a.num_layers / stages;
  }
  // An uneven split, or the embedding / the loss counted as layers: Megatron's split rules here,
  // the schedule's rules below on the layout's chunks (validate_schedule_for_layout).
  if (custom_pipeline_split(a)) GPT_RETURN_IF_ERROR(validate_pipeline_split(a));
  // The largest number of microbatches of the run (a ramp-up or step schedule's batches that
  // divide, evaluation's --global-batch-size): the bound of the layout's counters.
  const int64_t microbatches = num_microbatches(a, world_size);
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (a.num_layers > kIntMax || p > kIntMax || layers_per_virtual_stage > kIntMax || microbatches > kIntMax) {
    return invalid(absl::StrCat("pipeline layout: ", flag_name(&A::num_layers), ", ",
                                flag_name(&A::pipeline_model_parallel_size),
                                " or the number of microbatches "
                                "is too large"));
  }
  // Each number of microbatches a fresh run reaches (with a constant batch the one); Megatron
  // checks a batch's divisibility when the run reaches it (check_batch_sizes_reached).
  for (const auto& [at, batch] : batches.changes(0, a.train_iters)) {
    if (batch % *batch_per_microbatch != 0) continue;
    GPT_RETURN_IF_ERROR(validate_schedule_for_layout(a, static_cast<int>(p),
                                                     static_cast<int>(layers_per_virtual_stage),
                                                     static_cast<int>(batch / *batch_per_microbatch)));
    // A MoE layout's collectives ordered alike on every rank of each group (Megatron-LM #5749).
    GPT_RETURN_IF_ERROR(validate_collective_order(a, world_size, static_cast<int>(batch / *batch_per_microbatch)));
  }
  // The schedule generators count (chunk, microbatch) pairs in int.
  if (static_cast<int64_t>(virtual_pipeline_size(a)) * microbatches > kIntMax) {
    return invalid(absl::StrCat("pipeline layout: the number of microbatches (", microbatches,
                                ") x model chunks per pipeline rank (", virtual_pipeline_size(a), ") is too large"));
  }
  GPT_RETURN_IF_ERROR(check_derived_counts(a));
  // Recompute counts apply to the layers of one model chunk (Megatron's TransformerBlock: a
  // pipeline stage, or a virtual stage with interleaving); Megatron's message names this range.
  // With an uneven split, the largest chunk's.
  int64_t chunk_layers = layers_per_virtual_stage > 0 ? layers_per_virtual_stage : a.num_layers / p;
  if (custom_pipeline_split(a)) {
    const std::vector<int64_t> rank_layers = pipeline_rank_layers(a);
    chunk_layers = *std::max_element(rank_layers.begin(), rank_layers.end()) / virtual_pipeline_size(a);
  }
  if (recompute_granularity(a) == RecomputeGranularity::kFull && a.recompute_num_layers > chunk_layers) {
    return invalid(absl::StrCat(
        flag_name(&A::recompute_num_layers), " (", a.recompute_num_layers, ") must be between 1 and the layers ",
        layers_per_virtual_stage > 0 ? "per virtual pipeline stage" : "per pipeline stage", " (", chunk_layers, ")"));
  }
  return absl::OkStatus();
}


}  // namespace gpt
