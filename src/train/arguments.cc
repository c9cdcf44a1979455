#include "train/arguments.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <optional>
#include <span>
#include <sstream>
#include <string_view>

#include "CLI/CLI.hpp"
#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/checked_math.h"
#include "data/dataset_split.h"
#include "data/gpt_dataset_builder.h"
#include "parallel/pipeline/schedule.h"
#include "train/checkpoint_arguments.h"
#include "train/megatron_flags.h"
#include "train/model_arguments.h"
#include "train/numeric_flags.h"

namespace gpt {
namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::Status require_positive(const char* flag, int64_t value) {
  if (value <= 0) return invalid(absl::StrCat(flag, " must be a positive integer (got ", value, ")"));
  return absl::OkStatus();
}

// Flags that reach the kernels and the optimizer as FP32 must survive the cast: 1e39 would become
// infinity, and a positive 1e-50 would become 0 (an epsilon of 0, an all-zero initialization).
absl::Status require_fp32(const char* flag, double value, bool positive) {
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
    return invalid(absl::StrCat("--train-iters (", a.train_iters, ") x --global-batch-size (", gbs,
                                "): the number of training samples overflows a 64-bit count"));
  }
  const std::optional<int64_t> train_tokens = checked_multiply(*train_samples, a.seq_length);
  if (!train_tokens || !checked_add(*train_tokens, 1)) {
    return invalid(absl::StrCat("--train-iters (", a.train_iters, ") x --global-batch-size (", gbs, ") x --seq-length (",
                                a.seq_length, "): the number of training tokens overflows a 64-bit count"));
  }
  if (!checked_multiply(a.lr_decay_iters, gbs)) {
    return invalid(absl::StrCat("--lr-decay-iters (", a.lr_decay_iters, ") x --global-batch-size (", gbs,
                                "): the learning-rate schedule's sample count overflows a 64-bit count"));
  }
  if (!checked_multiply(a.lr_warmup_iters, gbs)) {
    return invalid(absl::StrCat("--lr-warmup-iters (", a.lr_warmup_iters, ") x --global-batch-size (", gbs,
                                "): the warmup's sample count overflows a 64-bit count"));
  }
  // Megatron's validation sample count: (train_iters / eval_interval + 1) evaluations.
  const int64_t evaluations = a.train_iters / a.eval_interval + 1;
  const std::optional<int64_t> eval_samples = checked_product(evaluations, a.eval_iters, gbs);
  if (!eval_samples || !checked_multiply(*eval_samples, a.seq_length)) {
    return invalid(absl::StrCat("--eval-iters (", a.eval_iters, ") x --global-batch-size (", gbs, ") x ", evaluations,
                                " evaluations (--train-iters / --eval-interval + 1): the number of validation samples "
                                "or tokens overflows a 64-bit count"));
  }
  return absl::OkStatus();
}

// Megatron's rules (transformer_config.py __post_init__, arguments.py validate_args), except that
// a method or count without full recompute is refused where Megatron would silently ignore it.
// The count's upper bound needs the pipeline layout: validate_for_world.
absl::Status validate_recompute(Arguments& a) {
  if (a.recompute_activations) {
    if (a.recompute_granularity == "full") {
      return invalid("--recompute-activations (selective recompute) and --recompute-granularity full cannot both be "
                     "given");
    }
    a.recompute_granularity = "selective";
  }
  const std::string& granularity = a.recompute_granularity;
  const bool method_given = a.was_given("--recompute-method");
  const bool count_given = a.was_given("--recompute-num-layers");
  if (!granularity.empty() && granularity != "full" && granularity != "selective") {
    return invalid(absl::StrCat("--recompute-granularity must be full or selective (got ", granularity, ")"));
  }
  if (method_given && a.recompute_method != "uniform" && a.recompute_method != "block") {
    return invalid(absl::StrCat("--recompute-method must be uniform or block (got ", a.recompute_method, ")"));
  }
  if (granularity.empty()) {
    if (method_given || count_given) {
      return invalid("--recompute-method and --recompute-num-layers need --recompute-granularity full (without it "
                     "nothing is recomputed)");
    }
    return absl::OkStatus();
  }
  if (granularity == "selective") {
    if (method_given) {
      return invalid("--recompute-method is not supported with --recompute-granularity selective (selective "
                     "recomputes the attention core of every layer)");
    }
    if (count_given) return invalid("--recompute-num-layers must not be given with --recompute-granularity selective");
    return absl::OkStatus();
  }
  if (!method_given) return invalid("--recompute-granularity full needs --recompute-method uniform or block");
  if (!count_given) {
    return invalid("--recompute-granularity full needs --recompute-num-layers (between 1 and the layers per "
                   "pipeline stage)");
  }
  if (a.recompute_num_layers < 1) {
    return invalid(absl::StrCat("--recompute-num-layers must be at least 1 (got ", a.recompute_num_layers, ")"));
  }
  return absl::OkStatus();
}

// The block of Megatron implementation choices in parse_arguments: each is refused only at a value
// whose Megatron meaning this program cannot carry out.
absl::Status validate_implementation_flags(const Arguments& a) {
  if (a.transformer_impl == "inference_optimized") {
    return invalid("--transformer-impl inference_optimized is not available (Megatron's inference-only layers): use "
                   "local or transformer_engine, which both run this program's kernels");
  }
  if (a.transformer_impl != "local" && a.transformer_impl != "transformer_engine") {
    return invalid(absl::StrCat("--transformer-impl must be local or transformer_engine (got ", a.transformer_impl,
                                ")"));
  }
  if (a.manual_gc_interval < 0) {
    return invalid(absl::StrCat("--manual-gc-interval must be >= 0 (got ", a.manual_gc_interval, ")"));
  }
  if (a.empty_unused_memory_level < 0 || a.empty_unused_memory_level > 2) {
    return invalid(absl::StrCat("--empty-unused-memory-level must be 0, 1 or 2 (got ", a.empty_unused_memory_level,
                                ")"));
  }
  if (a.use_flash_attn && (a.attention_backend == "local" || a.attention_backend == "unfused")) {
    return invalid(absl::StrCat("--use-flash-attn asks for flash attention, which --attention-backend ",
                                a.attention_backend, " turns off: give one of them"));
  }
  // Megatron's MLP without bias_activation_fusion applies F.gelu, the exact erf GeLU; with it,
  // bias_gelu_impl, the tanh approximation that is this program's only GeLU. With --swiglu the
  // GeLU fusion is not consulted (bias_activation_fusion follows --no-bias-swiglu-fusion).
  if (a.no_bias_gelu_fusion && !a.swiglu) {
    return invalid("--no-bias-gelu-fusion is not available: without the fusion Megatron computes the exact (erf) "
                   "GeLU, and this program has only the tanh approximation of Megatron's fused bias-GeLU (the "
                   "default); drop the flag");
  }
  if (a.no_check_for_nan_in_loss_and_grad) {
    return invalid("--no-check-for-nan-in-loss-and-grad: there is no such check to turn off here (a non-finite "
                   "gradient norm skips that iteration's update on every rank and is counted in the log line, "
                   "instead of stopping the run); drop the flag");
  }
  if (!a.rampup_batch_size.empty()) {
    return invalid("--rampup-batch-size is not supported: the global batch size is constant in this program (give "
                   "--global-batch-size only)");
  }
  return absl::OkStatus();
}

// Megatron's rules on the run's length and the schedule's units (arguments.py validate_args):
// --train-iters with iteration-based schedule flags, or --train-samples with sample-based ones. A
// warmup of 0 in the other unit is allowed, as there.
absl::Status validate_schedule_units(Arguments& a) {
  if (a.was_given("--train-samples")) {
    if (a.was_given("--lr-decay-iters")) {
      return invalid("--lr-decay-iters cannot be given with --train-samples (sample-based training): use "
                     "--lr-decay-samples");
    }
    if (a.lr_warmup_iters != 0) {
      return invalid("--lr-warmup-iters cannot be given with --train-samples (sample-based training): use "
                     "--lr-warmup-samples or --lr-warmup-fraction");
    }
    if (a.lr_warmup_fraction >= 0.0 && a.lr_warmup_samples != 0) {
      return invalid("--lr-warmup-fraction and --lr-warmup-samples cannot both be given");
    }
    if (!a.was_given("--lr-decay-samples")) a.lr_decay_samples = a.train_samples;
    return absl::OkStatus();
  }
  if (a.was_given("--lr-decay-samples")) {
    return invalid("--lr-decay-samples needs --train-samples (sample-based training): with --train-iters use "
                   "--lr-decay-iters");
  }
  if (a.lr_warmup_samples != 0) {
    return invalid("--lr-warmup-samples needs --train-samples (sample-based training): with --train-iters use "
                   "--lr-warmup-iters or --lr-warmup-fraction");
  }
  return absl::OkStatus();
}

}  // namespace

absl::StatusOr<Arguments> parse_arguments(int argc, const char* const* argv) {
  std::vector<std::string> args(argv, argv + argc);
  return parse_arguments(args);
}

namespace {

// Every flag pretrain_gpt accepts, bound to `a`.
void declare_flags(CLI::App& app, Arguments& a) {
  // A repeated flag takes its last value, as argparse's store action does (a launch script that
  // appends an override to a base command line), instead of CLI11's "given twice" error.
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  // Model.
  app.add_option("--num-layers", a.num_layers, "Number of transformer layers");
  app.add_option("--hidden-size", a.hidden_size, "Transformer hidden size");
  app.add_option("--ffn-hidden-size", a.ffn_hidden_size, "MLP hidden size (default 4 * hidden size)");
  app.add_option("--num-attention-heads", a.num_attention_heads, "Number of attention heads");
  app.add_option("--kv-channels", a.kv_channels, "Head dimension (default hidden size / heads)");
  app.add_option("--seq-length", a.seq_length, "Sequence length");
  app.add_option("--max-position-embeddings", a.max_position_embeddings, "Learned position embeddings");
  app.add_option("--make-vocab-size-divisible-by", a.make_vocab_size_divisible_by,
                 "Pad the vocabulary to a multiple of this times TP");
  app.add_flag("--untie-embeddings-and-output-weights", a.untie_embeddings_and_output_weights,
               "Separate output layer instead of the tied word embedding");
  app.add_option("--init-method-std", a.init_method_std, "Standard deviation of weight initialization");
  app.add_option("--norm-epsilon", a.norm_epsilon, "LayerNorm epsilon");
  app.add_option("--hidden-dropout", a.hidden_dropout,
                 "Dropout after the attention projection and the MLP (masks depend only on the seed, iteration, "
                 "sample, layer and element, so every parallel layout drops the same elements)");
  app.add_option("--attention-dropout", a.attention_dropout, "Dropout of the attention probabilities (same masks)");
  app.add_option("--position-embedding-type", a.position_embedding_type,
                 "learned_absolute, rope (rotary; no learned position embedding) or none");
  app.add_flag("--no-position-embedding", a.no_position_embedding,
               "No learned absolute position embedding (with learned_absolute: none; rope never has one)");
  app.add_option("--rotary-percent", a.rotary_percent, "Fraction of each head's dimensions that RoPE rotates");
  app.add_option("--rotary-base", a.rotary_base, "RoPE frequency base");
  app.add_option("--normalization", a.normalization, "LayerNorm or RMSNorm");
  app.add_flag("--swiglu", a.swiglu, "SwiGLU MLP (default --ffn-hidden-size: int(8h/3 / 64) * 64, as Megatron)");
  app.add_flag("--group-query-attention", a.group_query_attention, "Grouped-query attention");
  app.add_option("--num-query-groups", a.num_query_groups, "Key/value head groups with --group-query-attention");
  app.add_flag("--disable-bias-linear", a.disable_bias_linear, "No biases in the QKV, projection and MLP linears");
  // Parallelism.
  app.add_option("--tensor-model-parallel-size", a.tensor_model_parallel_size, "Tensor-parallel size");
  app.add_option("--pipeline-model-parallel-size", a.pipeline_model_parallel_size, "Pipeline-parallel size");
  app.add_option("--num-layers-per-virtual-pipeline-stage", a.num_layers_per_virtual_pipeline_stage,
                 "Layers per virtual stage (interleaved 1F1B schedule)");
  app.add_option("--num-virtual-stages-per-pipeline-rank", a.num_virtual_stages_per_pipeline_rank,
                 "Model chunks per pipeline rank (interleaved 1F1B schedule)");
  app.add_flag("--sequence-parallel", a.sequence_parallel, "Split activations along the sequence across TP");
  app.add_flag("--use-distributed-optimizer", a.use_distributed_optimizer, "Shard optimizer state across DP (ZeRO-1)");
  app.add_flag("--overlap-grad-reduce", a.overlap_grad_reduce, "Overlap gradient reduction with backward");
  app.add_flag("--overlap-param-gather", a.overlap_param_gather, "Overlap parameter all-gather with forward");
  app.add_option("--ddp-bucket-size", a.ddp_bucket_size,
                 "Elements per gradient bucket with --overlap-grad-reduce (default max(4e7, 1e6 x DP))");
  app.add_option("--distributed-backend", a.distributed_backend,
                 "nccl, mpi, or gloo (Megatron's CPU backend; runs on this program's MPI communicator)");
  app.add_option("--distributed-timeout-minutes", a.distributed_timeout_minutes, "Bound on every collective wait");
  // Training.
  app.add_option("--micro-batch-size", a.micro_batch_size, "Samples per microbatch per data-parallel rank");
  app.add_option("--global-batch-size", a.global_batch_size, "Samples per iteration over all ranks");
  app.add_option("--train-iters", a.train_iters, "Iterations to train (or --train-samples)");
  app.add_option("--train-samples", a.train_samples,
                 "Samples to train, instead of --train-iters: floor(samples / --global-batch-size) iterations, "
                 "the learning-rate schedule counted in samples (as Megatron)");
  app.add_option("--lr", a.lr, "Peak learning rate");
  app.add_option("--min-lr", a.min_lr, "Learning rate at the end of decay");
  app.add_option("--lr-decay-style", a.lr_decay_style, "constant, linear or cosine");
  app.add_option("--lr-decay-iters", a.lr_decay_iters, "Iterations to decay over (default --train-iters)");
  app.add_option("--lr-decay-samples", a.lr_decay_samples,
                 "With --train-samples: samples to decay over (default --train-samples)");
  app.add_option("--lr-warmup-iters", a.lr_warmup_iters, "Iterations of linear warmup");
  app.add_option("--lr-warmup-samples", a.lr_warmup_samples, "With --train-samples: samples of linear warmup");
  app.add_option("--lr-warmup-fraction", a.lr_warmup_fraction,
                 "Warmup as a fraction of the decay iterations or samples (fractional samples kept, as Megatron)");
  app.add_option("--weight-decay", a.weight_decay, "AdamW weight decay");
  app.add_option("--clip-grad", a.clip_grad, "Clip gradients to this global L2 norm (0: off)");
  app.add_option("--adam-beta1", a.adam_beta1, "Adam beta1");
  app.add_option("--adam-beta2", a.adam_beta2, "Adam beta2");
  app.add_option("--adam-eps", a.adam_eps, "Adam epsilon");
  app.add_flag("--bf16", a.bf16, "BF16 parameters and activations, FP32 master weights and gradients");
  app.add_flag("--fp16", a.fp16, "FP16 mixed precision (not supported: use --bf16)");
  app.add_option("--seed", a.seed, "Random seed (initialization and data order)");
  app.add_flag("--deterministic-mode", a.deterministic_mode,
               "Only bitwise reproducible algorithms (slower cuDNN attention backward)");
  app.add_option("--attention-backend", a.attention_backend,
                 "auto, fused (cuDNN fused attention), local or unfused (reference kernel); flash is not available");
  app.add_option("--recompute-granularity", a.recompute_granularity,
                 "Activation recompute: full (whole layers) or selective (attention core)");
  app.add_option("--recompute-method", a.recompute_method,
                 "With full: uniform (groups of --recompute-num-layers) or block (first --recompute-num-layers)");
  app.add_option("--recompute-num-layers", a.recompute_num_layers,
                 "With full: layers per recompute group (uniform) or recomputed per stage (block)");
  app.add_flag("--recompute-activations", a.recompute_activations, "Same as --recompute-granularity selective");

  // ---- Megatron implementation choices --------------------------------------------------------
  // Flags that Megatron launch scripts pass on nearly every run to pick kernels, fusions or
  // Python-side housekeeping. Each has one meaning in this program, which its help says; the
  // values that ask for something this program cannot do are refused in validate_arguments
  // (validate_implementation_flags), never accepted and ignored.
  app.add_option("--transformer-impl", a.transformer_impl,
                 "local or transformer_engine (Megatron's default): both run this program's own kernels "
                 "(cuBLASLt GEMMs, cuDNN fused attention, its norms), the same model and arithmetic either way");
  app.add_flag("--use-mcore-models", a.use_mcore_models,
               "Accepted (Megatron's default; deprecated there): the model is Megatron-Core's GPT, with its "
               "parameter names");
  app.add_flag("--no-gradient-accumulation-fusion", a.no_gradient_accumulation_fusion,
               "Accepted: weight gradients are always accumulated in FP32 by the GEMM itself (the arithmetic of "
               "Megatron's fused path; its unfused path rounds each microbatch's weight gradient to the parameter "
               "type before adding it)");
  app.add_flag("--attention-softmax-in-fp32", a.attention_softmax_in_fp32,
               "Accepted: attention's scaling, causal mask and softmax always run in FP32 here");
  app.add_flag("--no-rope-fusion", a.no_rope_fusion,
               "Accepted: RoPE is this program's own kernel, the same rotation as Megatron's fused or unfused one");
  app.add_flag("--manual-gc", a.manual_gc,
               "Accepted: no garbage collector runs in this program (no Python), so there are no collection "
               "pauses to align across ranks");
  app.add_option("--manual-gc-interval", a.manual_gc_interval,
                 "Accepted (>= 0): no garbage collector runs in this program");
  app.add_flag("--no-create-attention-mask-in-dataloader", a.no_create_attention_mask_in_dataloader,
               "Accepted: the data pipeline never builds attention masks here (attention is causal inside the "
               "kernels), which is what this flag asks for");
  app.add_flag("--no-mmap-bin-files", a.no_mmap_bin_files,
               "Accepted: the .bin files are memory-mapped either way; the tokens read are the same (Megatron's "
               "flag changes only how they are read)");
  app.add_flag("--use-flash-attn", a.use_flash_attn,
               "Flash attention: what --attention-backend auto does (cuDNN's fused flash attention where it "
               "applies, the exact kernel elsewhere); refused with --attention-backend local or unfused");
  app.add_flag("--no-masked-softmax-fusion", a.no_masked_softmax_fusion,
               "Accepted: scale, causal mask and softmax give the same FP32 values as Megatron's unfused path");
  app.add_flag("--no-bias-gelu-fusion", a.no_bias_gelu_fusion,
               "Refused with a GeLU MLP: without the fusion Megatron computes the exact (erf) GeLU, and this "
               "program's GeLU is the tanh approximation of Megatron's fused bias-GeLU; accepted with --swiglu, "
               "where it has no effect (as in Megatron)");
  app.add_flag("--no-bias-dropout-fusion", a.no_bias_dropout_fusion,
               "Accepted: bias, dropout and residual add give the same values fused or not (the dropout masks are "
               "this program's layout-independent ones either way)");
  app.add_flag("--no-bias-swiglu-fusion", a.no_bias_swiglu_fusion,
               "Accepted: SwiGLU is one FP32 kernel here, the formula of Megatron's fused and unfused paths");
  app.add_flag("--no-persist-layer-norm", a.no_persist_layer_norm,
               "Accepted: Apex's persistent LayerNorm kernel is never used; the norms are this program's own");
  app.add_flag("--no-async-tensor-model-parallel-allreduce", a.no_async_tensor_model_parallel_allreduce,
               "Accepted: tensor-parallel all-reduces of input gradients are not overlapped with the weight-gradient "
               "GEMMs here, which is what this flag asks for");
  app.add_flag("--use-cpu-initialization", a.use_cpu_initialization,
               "Accepted: parameters are always initialized on the host, from (seed, name, element index), and "
               "copied to the device: the same values in every parallel layout");
  app.add_flag("--apply-query-key-layer-scaling", a.apply_query_key_layer_scaling,
               "Accepted: scaling attention scores by 1 / layer number and back before the FP32 softmax is the "
               "identity; Megatron uses it for FP16's range (Transformer Engine only in FP16), and --fp16 is refused");
  app.add_flag("--accumulate-allreduce-grads-in-fp32", a.accumulate_allreduce_grads_in_fp32,
               "Accepted: gradients are always accumulated and reduced across data-parallel ranks in FP32 (Megatron's "
               "default with --bf16)");
  app.add_option("--empty-unused-memory-level", a.empty_unused_memory_level,
                 "0, 1 or 2, accepted: device memory is one arena taken before the first iteration and never freed, "
                 "so there is no allocator cache to empty at any level");
  app.add_flag("--no-check-for-nan-in-loss-and-grad", a.no_check_for_nan_in_loss_and_grad,
               "Refused: no NaN check stops a run here (a non-finite gradient norm skips that update on every "
               "rank), so there is nothing to turn off");
  app.add_flag("--calculate-per-token-loss", a.calculate_per_token_loss,
               "Accepted: every token counts here (no loss mask), so each microbatch has the same token count and "
               "the per-token mean over the global batch equals Megatron's default mean of microbatch means; the "
               "gradient and the logged loss are that mean either way");
  app.add_option("--rampup-batch-size", a.rampup_batch_size,
                 "Refused: the global batch size is constant in this program (start increment samples)")
      ->expected(3);
  // ---- end of Megatron implementation choices -------------------------------------------------
  // Data.
  app.add_flag("--mock-data", a.mock_data, "Synthetic data, no files needed");
  app.add_option("--vocab-size", a.vocab_size, "Vocabulary size for --mock-data or --tokenizer-type NullTokenizer");
  // Each occurrence replaces the list (argparse's nargs='*' keeps the last occurrence's values).
  app.add_option("--data-path", a.data_path, "Dataset prefix, or weight prefix pairs to blend")
      ->expected(1, -1)
      ->trigger_on_parse();
  app.add_option("--split", a.split, "Train/valid/test proportions of the documents");
  app.add_option("--vocab-file", a.vocab_file, "GPT-2 vocab.json");
  app.add_option("--merge-file", a.merge_file, "GPT-2 merges.txt");
  app.add_option("--tokenizer-type", a.tokenizer_type, "GPT2BPETokenizer or NullTokenizer");
  app.add_option("--data-cache-path", a.data_cache_path, "Directory for cached dataset indices");
  app.add_option("--device", a.device, "auto, cpu or cuda (not a Megatron flag)");
  // Evaluation and logging.
  app.add_option("--eval-interval", a.eval_interval, "Iterations between evaluations on the validation split");
  app.add_option("--eval-iters", a.eval_iters, "Global batches per evaluation (0: no evaluation)");
  app.add_option("--log-interval", a.log_interval, "Iterations between log lines");
  app.add_flag("--log-throughput", a.log_throughput,
               "Log the throughput per GPU (TFLOP/s, Megatron's formula) and, a field of this program's, tokens/s "
               "per GPU");
  app.add_flag("--log-params-norm", a.log_params_norm, "Log the L2 norm of the (FP32 main) parameters");
  app.add_flag("--log-num-zeros-in-grad", a.log_num_zeros_in_grad, "Log the number of zero gradient elements");
  app.add_option("--save", a.save, "Directory for checkpoints");
  app.add_option("--save-interval", a.save_interval, "Iterations between checkpoints");
  app.add_option("--load", a.load, "Directory to resume from (its latest_checkpointed_iteration.txt)");
  app.add_option("--ckpt-step", a.ckpt_step, "Iteration to load instead of the tracker's");
  app.add_flag("--no-load-optim", a.no_load_optim, "Do not load the optimizer state");
  app.add_flag("--no-load-rng", a.no_load_rng, "Do not load the random state (use --seed)");
  app.add_flag("--no-save-optim", a.no_save_optim, "Do not save the optimizer state");
  app.add_flag("--finetune", a.finetune, "Load parameters only; start at iteration 0");
  app.add_option("--ckpt-format", a.ckpt_format, "Checkpoint format: hdf5 (this program's only one)");
  app.add_flag("--async-save", a.async_save, "Write checkpoints in a background thread from a host copy");
  app.add_flag("--use-persistent-ckpt-worker", a.use_persistent_ckpt_worker, "Accepted with --async-save");
  app.add_option("--dist-ckpt-strictness", a.dist_ckpt_strictness,
                 "Missing / unexpected checkpoint keys on load: assume_ok_unexpected, log_unexpected, log_all, "
                 "raise_unexpected, raise_all, ignore_all");
  app.add_flag("--exit-signal-handler", a.exit_signal_handler, "On SIGTERM: finish the iteration, save, exit 0");
  app.add_option("--exit-duration-in-mins", a.exit_duration_in_mins, "Save and exit after this many minutes");
  app.add_option("--exit-interval", a.exit_interval, "Save and exit when the iteration is a multiple of this");
  app.add_option("--keep-latest-checkpoints", a.keep_latest_checkpoints,
                 "Delete all but the newest K committed checkpoints (not a Megatron flag)");
  app.add_flag("--load-fallback-to-previous", a.load_fallback_to_previous,
               "If the checkpoint to load is damaged, load the newest older one (not a Megatron flag)");
  app.add_option("--timing-log-level", a.timing_log_level,
                 "0: none; 1: per-phase times after each log line, (min, max) over ranks (forward-backward, "
                 "all-grads-sync, optimizer); 2: also forward-compute, backward-compute, batch-generator, "
                 "pipeline-send-recv, tp-comm, params-all-gather (device time from CUDA events on the GPU)");
  app.add_option("--metrics-file", a.metrics_file,
                 "One JSON object per log line and evaluation (JSON Lines; truncated when the run starts at "
                 "iteration 0, appended to when it resumes; not a Megatron flag)");
  app.add_option("--tensorboard-dir", a.tensorboard_dir,
                 "Write TensorBoard event files here (the logging rank; Megatron's tags)");
  app.add_option("--tensorboard-log-interval", a.tensorboard_log_interval,
                 "Iterations between TensorBoard scalars");
  app.add_option("--tensorboard-queue-size", a.tensorboard_queue_size,
                 "Accepted (> 0): events are written to the file as they come and flushed at each log line, "
                 "so there is no queue to size");
  app.add_flag("--log-timers-to-tensorboard", a.log_timers_to_tensorboard,
               "iteration-time, throughput (with --log-throughput) and the phase timers at each log line");
  app.add_flag("--log-memory-to-tensorboard", a.log_memory_to_tensorboard,
               "mem-reserved-bytes, mem-allocated-bytes, mem-allocated-count");
  app.add_flag("--log-validation-ppl-to-tensorboard", a.log_validation_ppl_to_tensorboard,
               "Validation perplexity too");
  app.add_flag("--log-world-size-to-tensorboard", a.log_world_size_to_tensorboard, "world-size");
  app.add_flag("--log-batch-size-to-tensorboard", a.log_batch_size_to_tensorboard, "batch-size");
  app.add_flag("--no-log-learnig-rate-to-tensorboard", a.no_log_learning_rate_to_tensorboard,
               "No learning-rate scalars (Megatron's spelling)");
  app.add_flag("--no-log-loss-scale-to-tensorboard", a.no_log_loss_scale_to_tensorboard, "No loss-scale scalars");

  // Decimal only, no silent clamp, no inf or nan (train/numeric_flags.h); ranges are checked in
  // validate_arguments, where the message can say what the flag means.
  make_numeric_options_strict(app);
}

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (static_cast<unsigned char>(c) < 0x20) {
      out += absl::StrFormat("\\u%04x", c);
      continue;
    }
    out += c;
  }
  return out + "\"";
}

// One JSON object per line: each declared flag (status from train/megatron_flags.h, "same" when not
// listed; the note, or the flag's help when the note is empty) and each undeclared refused flag.
std::string flag_table_json(const CLI::App& app) {
  std::string out;
  auto line = [&](std::string_view flag, FlagStatus status, std::string_view note, bool declared) {
    out += absl::StrCat("{\"flag\": ", json_string(flag), ", \"status\": ", json_string(flag_status_name(status)),
                        ", \"declared\": ", declared ? "true" : "false", ", \"note\": ", json_string(note), "}\n");
  };
  for (const CLI::Option* option : app.get_options()) {
    if (option->get_lnames().empty()) continue;  // --help's -h
    const std::string flag = "--" + option->get_lnames().front();
    if (flag == "--help") continue;
    const MegatronFlagNote* note = find_megatron_flag_note(flag);
    line(flag, note != nullptr ? note->status : FlagStatus::kSame,
         note != nullptr && !note->note.empty() ? note->note : std::string_view(option->get_description()), true);
  }
  for (const MegatronFlagNote& note : megatron_flag_notes()) {
    if (!note.declared) line(note.flag, note.status, note.note, false);
  }
  return out;
}

}  // namespace

absl::StatusOr<Arguments> parse_arguments(const std::vector<std::string>& argv) {
  Arguments a;
  CLI::App app{"Pretrain a GPT model (Megatron-LM compatible flags)", argv.empty() ? "pretrain_gpt" : argv[0]};
  declare_flags(app, a);
  const std::span<const std::string> given(argv.size() > 1 ? argv.data() + 1 : argv.data(),
                                           argv.size() > 1 ? argv.size() - 1 : 0);
  // scripts/megatron_flags.py reads the flag table (docs/MEGATRON_FLAGS.md).
  if (std::find(given.begin(), given.end(), "--megatron-flag-table") != given.end()) {
    return absl::CancelledError(flag_table_json(app));
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

absl::Status validate_data_arguments(Arguments& a) {
  if (a.mock_data == !a.data_path.empty()) {
    return invalid(a.mock_data ? "--mock-data and --data-path cannot both be given"
                               : "no training data: pass --data-path (a Megatron dataset prefix) or --mock-data");
  }
  if (!a.data_path.empty()) {
    // One prefix, prefixes only (blended by size), or weight prefix pairs with positive weights.
    GPT_ASSIGN_OR_RETURN(const DataBlend blend, parse_data_path(a.data_path));
    if (blend.weights) {
      for (size_t i = 0; i < blend.weights->size(); ++i) {
        if (!((*blend.weights)[i] > 0.0)) {
          return invalid(absl::StrCat("--data-path: '", a.data_path[2 * i], "' (the weight of ", blend.prefixes[i],
                                      ") is not a positive weight"));
        }
      }
    }
    GPT_RETURN_IF_ERROR(parse_split(a.split).status());
  }
  // The tokenizer: GPT-2 BPE files, or NullTokenizer with --vocab-size N (Megatron's: ids [0, N)
  // plus the end-of-document id N). --mock-data takes either, as in Megatron, or --vocab-size alone
  // (this program's shorthand: a vocabulary of exactly N).
  if (a.tokenizer_type.empty() && !a.vocab_file.empty()) a.tokenizer_type = "GPT2BPETokenizer";
  if (a.tokenizer_type.empty() && !a.mock_data) {
    return invalid("--data-path needs a tokenizer: --vocab-file and --merge-file (GPT2BPETokenizer), or "
                   "--tokenizer-type NullTokenizer with --vocab-size");
  }
  if (a.tokenizer_type == "GPT2BPETokenizer") {
    if (a.vocab_file.empty() || a.merge_file.empty()) {
      return invalid("--tokenizer-type GPT2BPETokenizer needs --vocab-file and --merge-file");
    }
    return absl::OkStatus();
  }
  if (!a.tokenizer_type.empty() && a.tokenizer_type != "NullTokenizer") {
    return invalid(absl::StrCat("--tokenizer-type must be GPT2BPETokenizer or NullTokenizer (got ", a.tokenizer_type,
                                ")"));
  }
  if (!a.was_given("--vocab-size")) {
    return invalid(absl::StrCat("missing required flag --vocab-size (needed by ",
                                a.tokenizer_type.empty() ? "--mock-data" : "--tokenizer-type NullTokenizer", ")"));
  }
  GPT_RETURN_IF_ERROR(require_positive("--vocab-size", a.vocab_size));
  if (a.vocab_size < 2) return invalid(absl::StrCat("--vocab-size must be at least 2 (got ", a.vocab_size, ")"));
  return absl::OkStatus();
}

absl::Status validate_arguments(Arguments& a) {
  // Required flags.
  const std::pair<const char*, int64_t> required[] = {
      {"--num-layers", a.num_layers},         {"--hidden-size", a.hidden_size},
      {"--num-attention-heads", a.num_attention_heads}, {"--seq-length", a.seq_length},
      {"--max-position-embeddings", a.max_position_embeddings}, {"--micro-batch-size", a.micro_batch_size}};
  for (const auto& [flag, value] : required) {
    if (!a.was_given(flag)) return invalid(absl::StrCat("missing required flag ", flag));
    GPT_RETURN_IF_ERROR(require_positive(flag, value));
  }
  // The run's length: in iterations or in samples (Megatron's two ways), exactly one.
  const bool by_samples = a.was_given("--train-samples");
  if (by_samples == a.was_given("--train-iters")) {
    return invalid(by_samples ? "--train-iters and --train-samples cannot both be given (iteration-based or "
                                "sample-based training)"
                              : "missing required flag --train-iters (or --train-samples)");
  }
  GPT_RETURN_IF_ERROR(by_samples ? require_positive("--train-samples", a.train_samples)
                                 : require_positive("--train-iters", a.train_iters));
  if (!a.was_given("--lr")) return invalid("missing required flag --lr");
  GPT_RETURN_IF_ERROR(validate_data_arguments(a));
  GPT_RETURN_IF_ERROR(validate_checkpoint_arguments(a));

  // Sizes.
  const std::pair<const char*, int64_t> positive[] = {
      {"--make-vocab-size-divisible-by", a.make_vocab_size_divisible_by},
      {"--tensor-model-parallel-size", a.tensor_model_parallel_size},
      {"--pipeline-model-parallel-size", a.pipeline_model_parallel_size},
      {"--log-interval", a.log_interval},
      {"--eval-interval", a.eval_interval}};
  for (const auto& [flag, value] : positive) GPT_RETURN_IF_ERROR(require_positive(flag, value));
  const std::pair<const char*, int64_t> positive_if_given[] = {
      {"--ffn-hidden-size", a.ffn_hidden_size},   {"--kv-channels", a.kv_channels},
      {"--global-batch-size", a.global_batch_size}, {"--lr-decay-iters", a.lr_decay_iters},
      {"--lr-decay-samples", a.lr_decay_samples},
      {"--num-layers-per-virtual-pipeline-stage", a.num_layers_per_virtual_pipeline_stage},
      {"--num-virtual-stages-per-pipeline-rank", a.num_virtual_stages_per_pipeline_rank},
      {"--ddp-bucket-size", a.ddp_bucket_size}};
  for (const auto& [flag, value] : positive_if_given) {
    if (a.was_given(flag)) GPT_RETURN_IF_ERROR(require_positive(flag, value));
  }
  if (a.eval_iters < 0) return invalid(absl::StrCat("--eval-iters must be >= 0 (got ", a.eval_iters, ")"));
  // The vocabulary is known here with NullTokenizer (ids [0, N) plus eod N) and --mock-data's
  // --vocab-size; with a vocab file it is checked again once read (the memory plan), here only the
  // multiple.
  const std::optional<int64_t> known_vocab = a.tokenizer_type == "NullTokenizer" ? checked_add(a.vocab_size, 1)
                                             : a.tokenizer_type.empty()           ? std::optional<int64_t>(a.vocab_size)
                                                                                  : std::optional<int64_t>(1);
  if (!known_vocab) return invalid(absl::StrCat("--vocab-size (", a.vocab_size, ") is too large"));
  GPT_RETURN_IF_ERROR(checked_padded_vocab_size(a, *known_vocab).status());
  if (a.timing_log_level < 0 || a.timing_log_level > 2) {
    return invalid(absl::StrCat("--timing-log-level must be 0, 1 or 2 (got ", a.timing_log_level, ")"));
  }
  if (a.was_given("--tensorboard-dir") && a.tensorboard_dir.empty()) {
    return invalid("--tensorboard-dir needs a directory (got an empty one)");
  }
  GPT_RETURN_IF_ERROR(require_positive("--tensorboard-log-interval", a.tensorboard_log_interval));
  GPT_RETURN_IF_ERROR(require_positive("--tensorboard-queue-size", a.tensorboard_queue_size));
  if (a.was_given("--metrics-file") && a.metrics_file.empty()) {
    return invalid("--metrics-file needs a path (got an empty one)");
  }
  if (a.lr_warmup_iters < 0) return invalid(absl::StrCat("--lr-warmup-iters must be >= 0 (got ", a.lr_warmup_iters, ")"));
  if (a.lr_warmup_samples < 0) {
    return invalid(absl::StrCat("--lr-warmup-samples must be >= 0 (got ", a.lr_warmup_samples, ")"));
  }

  if (!(a.distributed_timeout_minutes > 0.0) || a.distributed_timeout_minutes > kMaxTimeoutMinutes) {
    return invalid(absl::StrCat("--distributed-timeout-minutes must be positive and at most ", kMaxTimeoutMinutes,
                                " (got ", a.distributed_timeout_minutes, ")"));
  }

  // Model shape.
  if (a.ffn_hidden_size == 0 && a.swiglu) {
    // Megatron: int((4 * h * 2 / 3) / 64) * 64 (the gated MLP's parameters close to a 4h MLP's),
    // which is floor(8h / 192) * 64 in integers.
    const std::optional<int64_t> eight_h = checked_multiply(8, a.hidden_size);
    if (!eight_h) {
      return invalid(absl::StrCat("--hidden-size (", a.hidden_size,
                                  ") is too large: the default --ffn-hidden-size with --swiglu overflows"));
    }
    a.ffn_hidden_size = *eight_h / 192 * 64;
    if (a.ffn_hidden_size <= 0) {
      return invalid(absl::StrCat("--swiglu: the default --ffn-hidden-size (int(8 x --hidden-size / 3 / 64) x 64) is 0 "
                                  "for --hidden-size ", a.hidden_size, ": give --ffn-hidden-size"));
    }
  }
  if (a.ffn_hidden_size == 0) {
    const std::optional<int64_t> ffn = checked_multiply(4, a.hidden_size);
    if (!ffn) {
      return invalid(absl::StrCat("--hidden-size (", a.hidden_size,
                                  ") is too large: the default --ffn-hidden-size (4 x --hidden-size) overflows a "
                                  "64-bit integer"));
    }
    a.ffn_hidden_size = *ffn;
  }
  if (a.kv_channels == 0) {
    if (a.hidden_size % a.num_attention_heads != 0) {
      return invalid(absl::StrCat("--hidden-size (", a.hidden_size, ") must be divisible by --num-attention-heads (",
                                  a.num_attention_heads, ")"));
    }
    a.kv_channels = a.hidden_size / a.num_attention_heads;
  }
  if (!checked_product(3, a.num_attention_heads, a.kv_channels)) {
    return invalid(absl::StrCat("--num-attention-heads (", a.num_attention_heads, ") x --kv-channels (", a.kv_channels,
                                ") is too large: the QKV projection's size overflows a 64-bit integer"));
  }
  if (a.seq_length > a.max_position_embeddings) {
    return invalid(absl::StrCat("--seq-length (", a.seq_length, ") must not exceed --max-position-embeddings (",
                                a.max_position_embeddings, ")"));
  }
  GPT_RETURN_IF_ERROR(validate_model_family(a));
  if (!(a.init_method_std > 0.0)) return invalid(absl::StrCat("--init-method-std must be positive (got ", a.init_method_std, ")"));
  GPT_RETURN_IF_ERROR(require_fp32("--init-method-std", a.init_method_std, /*positive=*/true));
  if (!(a.norm_epsilon > 0.0)) return invalid(absl::StrCat("--norm-epsilon must be positive (got ", a.norm_epsilon, ")"));
  GPT_RETURN_IF_ERROR(require_fp32("--norm-epsilon", a.norm_epsilon, /*positive=*/true));

  // Precision.
  if (a.fp16) return invalid("--fp16 is not supported: use --bf16 (or neither, for FP32)");

  // Attention implementation.
  if (a.attention_backend == "flash") {
    return invalid("--attention-backend flash is not available (no FlashAttention library in this build): use fused "
                   "(cuDNN's fused flash attention) or auto");
  }
  if (a.attention_backend != "auto" && a.attention_backend != "fused" && a.attention_backend != "local" &&
      a.attention_backend != "unfused") {
    return invalid(absl::StrCat("--attention-backend must be auto, fused, local or unfused (got ", a.attention_backend,
                                ")"));
  }

  GPT_RETURN_IF_ERROR(validate_recompute(a));
  GPT_RETURN_IF_ERROR(validate_implementation_flags(a));

  // Optimizer and schedule.
  if (!(a.lr >= 0.0)) return invalid(absl::StrCat("--lr must be >= 0 (got ", a.lr, ")"));
  GPT_RETURN_IF_ERROR(require_fp32("--lr", a.lr, /*positive=*/false));
  if (!(a.min_lr >= 0.0) || a.min_lr > a.lr) {
    return invalid(absl::StrCat("--min-lr (", a.min_lr, ") must be between 0 and --lr (", a.lr, ")"));
  }
  if (a.lr_decay_style != "constant" && a.lr_decay_style != "linear" && a.lr_decay_style != "cosine") {
    return invalid(absl::StrCat("--lr-decay-style must be constant, linear or cosine (got ", a.lr_decay_style, ")"));
  }
  // The default -1 means "not given"; a negative value typed by the user is an error, not that.
  if (a.was_given("--lr-warmup-fraction") && !(a.lr_warmup_fraction >= 0.0)) {
    return invalid(absl::StrCat("--lr-warmup-fraction must be in [0, 1] (got ", a.lr_warmup_fraction, ")"));
  }
  if (a.lr_warmup_fraction > 1.0) {
    return invalid(absl::StrCat("--lr-warmup-fraction must be in [0, 1] (got ", a.lr_warmup_fraction, ")"));
  }
  GPT_RETURN_IF_ERROR(validate_schedule_units(a));
  if (by_samples) {
    const double warmup_samples = a.lr_warmup_fraction >= 0.0 ? a.lr_warmup_fraction * a.lr_decay_samples
                                                              : static_cast<double>(a.lr_warmup_samples);
    if (a.lr_decay_style != "constant" && warmup_samples >= static_cast<double>(a.lr_decay_samples)) {
      return invalid(absl::StrCat("learning-rate warmup (", warmup_samples,
                                  " samples) must be shorter than --lr-decay-samples (", a.lr_decay_samples,
                                  a.was_given("--lr-decay-samples") ? "" : ", the default: --train-samples", ")"));
    }
  } else {
    if (a.lr_decay_iters == 0) a.lr_decay_iters = a.train_iters;
    if (a.lr_warmup_fraction >= 0.0 && a.lr_warmup_iters != 0) {
      return invalid("--lr-warmup-fraction and --lr-warmup-iters cannot both be given");
    }
    const double warmup_iters = a.lr_warmup_fraction >= 0.0 ? a.lr_warmup_fraction * a.lr_decay_iters
                                                             : static_cast<double>(a.lr_warmup_iters);
    if (a.lr_decay_style != "constant" && warmup_iters >= static_cast<double>(a.lr_decay_iters)) {
      return invalid(absl::StrCat("learning-rate warmup (", warmup_iters,
                                  " iterations) must be shorter than --lr-decay-iters (", a.lr_decay_iters, ")"));
    }
  }
  if (!(a.weight_decay >= 0.0)) return invalid(absl::StrCat("--weight-decay must be >= 0 (got ", a.weight_decay, ")"));
  GPT_RETURN_IF_ERROR(require_fp32("--weight-decay", a.weight_decay, /*positive=*/false));
  if (!(a.clip_grad >= 0.0)) return invalid(absl::StrCat("--clip-grad must be >= 0 (got ", a.clip_grad, ")"));
  // The betas are FP32 in the optimizer: 1 - 1e-10 would round to 1 there and divide by zero in
  // the bias correction.
  if (!(a.adam_beta1 >= 0.0 && static_cast<float>(a.adam_beta1) < 1.0f)) {
    return invalid(absl::StrCat("--adam-beta1 must be in [0, 1) (in FP32; got ", a.adam_beta1, ")"));
  }
  if (!(a.adam_beta2 >= 0.0 && static_cast<float>(a.adam_beta2) < 1.0f)) {
    return invalid(absl::StrCat("--adam-beta2 must be in [0, 1) (in FP32; got ", a.adam_beta2, ")"));
  }
  if (!(a.adam_eps > 0.0)) return invalid(absl::StrCat("--adam-eps must be positive (got ", a.adam_eps, ")"));
  GPT_RETURN_IF_ERROR(require_fp32("--adam-eps", a.adam_eps, /*positive=*/true));
  if (a.seed < 0) return invalid(absl::StrCat("--seed must be >= 0 (got ", a.seed, ")"));

  if (a.device != "auto" && a.device != "cpu" && a.device != "cuda") {
    return invalid(absl::StrCat("--device must be auto, cpu or cuda (got ", a.device, ")"));
  }

  // Data parallelism: Megatron's rules.
  if (a.overlap_param_gather && !a.use_distributed_optimizer) {
    return invalid("--overlap-param-gather needs --use-distributed-optimizer (it overlaps the distributed "
                   "optimizer's parameter all-gather)");
  }

  // Parallel flags that do not need the world size.
  if (a.distributed_backend == "gloo") {
    // Megatron's CPU backend. This program's collectives on host memory are MPI's (the launcher
    // needs MPI anyway), so a Megatron CPU launch runs unchanged on them; said once, not silently.
    a.distributed_backend = "mpi";
    a.notes.push_back("--distributed-backend gloo: this program has no Gloo backend; its MPI communicator runs the "
                      "same collectives");
  }
  if (a.distributed_backend != "" && a.distributed_backend != "nccl" && a.distributed_backend != "mpi") {
    return invalid(absl::StrCat("--distributed-backend must be nccl, mpi or gloo (got ", a.distributed_backend, ")"));
  }
  const int64_t tp = a.tensor_model_parallel_size;
  if (a.num_attention_heads % tp != 0) {
    return invalid(absl::StrCat("--num-attention-heads (", a.num_attention_heads,
                                ") must be divisible by --tensor-model-parallel-size (", tp, ")"));
  }
  if (a.hidden_size % tp != 0) {
    return invalid(absl::StrCat("--hidden-size (", a.hidden_size, ") must be divisible by --tensor-model-parallel-size (",
                                tp, ")"));
  }
  if (a.ffn_hidden_size % tp != 0) {
    return invalid(absl::StrCat("--ffn-hidden-size (", a.ffn_hidden_size,
                                ") must be divisible by --tensor-model-parallel-size (", tp, ")"));
  }
  if (a.sequence_parallel && a.seq_length % tp != 0) {
    return invalid(absl::StrCat("--seq-length (", a.seq_length, ") must be divisible by --tensor-model-parallel-size (",
                                tp, ") with --sequence-parallel"));
  }
  if (a.attention_backend == "fused") {
    if (!a.bf16) return invalid("--attention-backend fused needs --bf16 (cuDNN's fused attention is BF16 only)");
    if (a.kv_channels % 8 != 0 || a.kv_channels > 128) {
      return invalid(absl::StrCat("--attention-backend fused needs a head dimension (--kv-channels) that is a multiple "
                                  "of 8 and at most 128 (got ", a.kv_channels, ")"));
    }
    if (a.attention_dropout > 0.0) {
      return invalid("--attention-backend fused cannot apply --attention-dropout (cuDNN draws its own masks, which "
                     "differ from this program's layout-independent ones): use --attention-dropout 0 or "
                     "--attention-backend auto");
    }
    if (a.num_query_groups != a.num_attention_heads) {
      return invalid("--attention-backend fused does not take grouped-query attention in this program yet (cuDNN's "
                     "fused attention runs only with one key/value head per query head): use --attention-backend "
                     "auto, which runs the exact attention kernels");
    }
  }
  return absl::OkStatus();
}

absl::StatusOr<int64_t> checked_padded_vocab_size(const Arguments& a, int64_t vocab_size) {
  const std::optional<int64_t> multiple =
      checked_multiply(a.make_vocab_size_divisible_by, a.tensor_model_parallel_size);
  if (!multiple) {
    return invalid(absl::StrCat("--make-vocab-size-divisible-by (", a.make_vocab_size_divisible_by,
                                ") x --tensor-model-parallel-size (", a.tensor_model_parallel_size,
                                ") overflows a 64-bit integer"));
  }
  const std::optional<int64_t> padded = checked_round_up(vocab_size, *multiple);
  if (!padded) {
    return invalid(absl::StrCat("the vocabulary (", vocab_size, ") padded to a multiple of --make-vocab-size-divisible-by (",
                                a.make_vocab_size_divisible_by, ") x --tensor-model-parallel-size (",
                                a.tensor_model_parallel_size, ") overflows a 64-bit integer"));
  }
  return *padded;
}

int64_t data_parallel_size(const Arguments& a, int64_t world_size) {
  return world_size / (a.tensor_model_parallel_size * a.pipeline_model_parallel_size);
}

int virtual_pipeline_size(const Arguments& a) {
  if (a.num_virtual_stages_per_pipeline_rank > 0) return static_cast<int>(a.num_virtual_stages_per_pipeline_rank);
  if (a.num_layers_per_virtual_pipeline_stage > 0) {
    return static_cast<int>(a.num_layers / (a.pipeline_model_parallel_size * a.num_layers_per_virtual_pipeline_stage));
  }
  return 1;
}

int64_t num_microbatches(const Arguments& a, int64_t world_size) {
  return a.global_batch_size / (a.micro_batch_size * data_parallel_size(a, world_size));
}

absl::Status validate_for_world(Arguments& a, int64_t world_size) {
  // An overflowing product is larger than any world, so it gets the divisibility message.
  const int64_t model_parallel =
      checked_multiply(a.tensor_model_parallel_size, a.pipeline_model_parallel_size).value_or(0);
  if (model_parallel == 0 || world_size % model_parallel != 0) {
    return invalid(absl::StrCat("world size (", world_size, ") must be divisible by --tensor-model-parallel-size (",
                                a.tensor_model_parallel_size, ") x --pipeline-model-parallel-size (",
                                a.pipeline_model_parallel_size, ")"));
  }
  const int64_t dp = world_size / model_parallel;
  const std::optional<int64_t> batch_per_microbatch = checked_multiply(a.micro_batch_size, dp);
  if (!batch_per_microbatch) {
    return invalid(absl::StrCat("--micro-batch-size (", a.micro_batch_size, ") x data-parallel size (", dp,
                                ") overflows a 64-bit integer"));
  }
  if (a.global_batch_size == 0) a.global_batch_size = *batch_per_microbatch;
  if (a.global_batch_size % *batch_per_microbatch != 0) {
    return invalid(absl::StrCat("--global-batch-size (", a.global_batch_size, ") must be divisible by --micro-batch-size (",
                                a.micro_batch_size, ") x data-parallel size (", dp, ")"));
  }
  if (a.was_given("--train-samples")) {
    // Megatron's update_train_iters without a batch-size ramp: whole global batches only (floor),
    // the samples of a last partial batch are not trained.
    a.train_iters = a.train_samples / a.global_batch_size;
    if (a.train_iters == 0) {
      return invalid(absl::StrCat("--train-samples (", a.train_samples, ") is less than one global batch (",
                                  a.global_batch_size, " samples): no iteration to train"));
    }
  }
  // The pipeline layout, before any dataset or buffer exists.
  const int64_t p = a.pipeline_model_parallel_size;
  if (a.num_layers_per_virtual_pipeline_stage > 0 && a.num_virtual_stages_per_pipeline_rank > 0) {
    return invalid("--num-layers-per-virtual-pipeline-stage and --num-virtual-stages-per-pipeline-rank cannot both "
                   "be given");
  }
  int64_t layers_per_virtual_stage = a.num_layers_per_virtual_pipeline_stage;
  if (a.num_virtual_stages_per_pipeline_rank > 0) {
    // Overflowing: more stages than any layer count, so the divisibility message.
    const int64_t stages = checked_multiply(p, a.num_virtual_stages_per_pipeline_rank).value_or(0);
    if (p == 1) {
      return invalid("--num-virtual-stages-per-pipeline-rank needs --pipeline-model-parallel-size > 1");
    }
    if (stages == 0 || a.num_layers % stages != 0) {
      return invalid(absl::StrCat("--num-layers (", a.num_layers, ") must be divisible by --pipeline-model-parallel-size (",
                                  p, ") x --num-virtual-stages-per-pipeline-rank (",
                                  a.num_virtual_stages_per_pipeline_rank, ")"));
    }
    layers_per_virtual_stage = a.num_layers / stages;
  }
  const int64_t microbatches = a.global_batch_size / *batch_per_microbatch;
  constexpr int64_t kIntMax = std::numeric_limits<int>::max();
  if (a.num_layers > kIntMax || p > kIntMax || layers_per_virtual_stage > kIntMax || microbatches > kIntMax) {
    return invalid("pipeline layout: --num-layers, --pipeline-model-parallel-size or the number of microbatches "
                   "is too large");
  }
  GPT_RETURN_IF_ERROR(pipeline::validate_pipeline_layout(static_cast<int>(a.num_layers), static_cast<int>(p),
                                                          static_cast<int>(layers_per_virtual_stage),
                                                          static_cast<int>(microbatches)));
  // The schedule generators count (chunk, microbatch) pairs in int.
  if (static_cast<int64_t>(virtual_pipeline_size(a)) * microbatches > kIntMax) {
    return invalid(absl::StrCat("pipeline layout: the number of microbatches (", microbatches,
                                ") x model chunks per pipeline rank (", virtual_pipeline_size(a), ") is too large"));
  }
  GPT_RETURN_IF_ERROR(check_derived_counts(a));
  // Recompute counts apply to the layers of one model chunk (Megatron's TransformerBlock: a
  // pipeline stage, or a virtual stage with interleaving); Megatron's message names this range.
  const int64_t chunk_layers = layers_per_virtual_stage > 0 ? layers_per_virtual_stage : a.num_layers / p;
  if (a.recompute_granularity == "full" && a.recompute_num_layers > chunk_layers) {
    return invalid(absl::StrCat("--recompute-num-layers (", a.recompute_num_layers, ") must be between 1 and the layers ",
                                layers_per_virtual_stage > 0 ? "per virtual pipeline stage" : "per pipeline stage",
                                " (", chunk_layers, ")"));
  }
  return absl::OkStatus();
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
  c.style = a.lr_decay_style == "constant" ? LrDecayStyle::kConstant
            : a.lr_decay_style == "cosine" ? LrDecayStyle::kCosine
                                           : LrDecayStyle::kLinear;
  return c;
}


}  // namespace gpt
