// The flag table's rows for Megatron's training, precision and implementation-choice argument groups, in --help's order
// (train/flag_table.h says what a row holds; train/flag_rows.h joins the groups).
#include "train/flag_rows.h"

#include "train/flag_enums.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpt {
namespace {

using A = Arguments;
using enum FlagStatus;
using enum PyRule;

// Sample-based runs keep train_iters None in Megatron's namespace (validation filled it here).
PyValue train_iters_value(const Arguments& a) {
  return a.train_samples > 0 && !a.was_given("--train-iters") ? PyValue() : none_if_zero(a.train_iters);
}
// Megatron leaves it None and decays over train_iters in the scheduler; validation filled it here.
PyValue lr_decay_iters_value(const Arguments& a) {
  return a.was_given("--lr-decay-iters") ? none_if_zero(a.lr_decay_iters) : PyValue();
}
// Megatron's --rampup-batch-size is a list of ints (nargs 3, type int): [16, 8, 300000].
PyValue rampup_value(const Arguments& a) {
  if (a.rampup_batch_size.empty()) return PyValue();
  return absl::StrCat("[", absl::StrJoin(a.rampup_batch_size, ", "), "]");
}
// Megatron's --attention-backend is an enum, printed with its class name.
PyValue attention_backend_value(const Arguments& a) { return absl::StrCat("AttnBackend.", a.attention_backend); }

// --cross-entropy-fusion-impl's values: this program's fused kernel either way.
constexpr std::string_view kCrossEntropyFusionImpls[] = {"native", "te"};

constexpr FlagRow kRows[] = {
    // Training.
    row("--micro-batch-size", &A::micro_batch_size, "Samples per microbatch per data-parallel rank")
        .required()
        .positive(),
    row("--global-batch-size", &A::global_batch_size, "Samples per iteration over all ranks")
        .positive_if_given()
        .shown(kNoneIfZero),
    row("--train-iters", &A::train_iters, "Iterations to train (or --train-samples)").shown(train_iters_value),
    row("--train-samples", &A::train_samples,
        "Samples to train, instead of --train-iters: floor(samples / --global-batch-size) iterations, "
        "the learning-rate schedule counted in samples (as Megatron)")
        .shown(kNoneIfZero),
    row("--lr", &A::lr, "Peak learning rate").non_negative(),
    row("--min-lr", &A::min_lr, "Learning rate at the end of decay"),
    row("--decoupled-lr", &A::decoupled_lr,
        "Peak learning rate of the word embedding and the output layer weight (Megatron's "
        "is_embedding_or_output_parameter; not the position embedding), on the same warmup and decay")
        .shown(kNoneIfNegative),
    row("--decoupled-min-lr", &A::decoupled_min_lr,
        "With --decoupled-lr: their minimum learning rate (default --min-lr)")
        .shown(kNoneIfNegative),
    row("--lr-decay-style", &A::lr_decay_style, "constant, linear or cosine")
        .one_of(flag_enum_names<LrDecayStyle>())
        .megatron(kRefusedAtValues, "constant, linear and cosine; inverse-square-root and WSD are refused"),
    row("--lr-decay-iters", &A::lr_decay_iters, "Iterations to decay over (default --train-iters)")
        .positive_if_given()
        .shown(lr_decay_iters_value),
    row("--lr-decay-samples", &A::lr_decay_samples,
        "With --train-samples: samples to decay over (default --train-samples)")
        .positive_if_given()
        .shown(kNoneIfZero),
    row("--lr-warmup-iters", &A::lr_warmup_iters, "Iterations of linear warmup").non_negative(),
    row("--lr-warmup-samples", &A::lr_warmup_samples, "With --train-samples: samples of linear warmup").non_negative(),
    row("--lr-warmup-fraction", &A::lr_warmup_fraction,
        "Warmup as a fraction of the decay iterations or samples (fractional samples kept, as Megatron)")
        .shown(kNoneIfNegative),
    row("--weight-decay", &A::weight_decay, "AdamW weight decay").non_negative(),
    row("--apply-wd-to-qk-layernorm", &A::apply_wd_to_qk_layernorm,
        "Weight decay on --qk-layernorm's weights and biases too (by default, as every 1-D parameter and "
        "bias, they take none); without --qk-layernorm it changes nothing, as Megatron"),
    row("--clip-grad", &A::clip_grad, "Clip gradients to this global L2 norm (0: off)").non_negative(),
    row("--adam-beta1", &A::adam_beta1, "Adam beta1"), row("--adam-beta2", &A::adam_beta2, "Adam beta2"),
    row("--adam-eps", &A::adam_eps, "Adam epsilon").positive(),
    row("--bf16", &A::bf16, "BF16 parameters and activations, FP32 master weights and gradients"),
    row("--fp16", &A::fp16,
        "FP16 parameters and activations, FP32 master weights and gradients, with Megatron's loss scaler "
        "(dynamic unless --loss-scale)"),
    row("--loss-scale", &A::loss_scale,
        "Constant loss scale with --fp16 or --bf16 (Megatron's ConstantGradScaler); default: --fp16 scales "
        "dynamically")
        .shown(kNoneIfNegative),
    row("--initial-loss-scale", &A::initial_loss_scale, "Initial scale of --fp16's dynamic loss scaler")
        .shown(kIntIfIntegral),
    row("--min-loss-scale", &A::min_loss_scale, "Floor of --fp16's dynamic loss scale"),
    row("--loss-scale-window", &A::loss_scale_window,
        "Steps without overflow after which the dynamic loss scale doubles"),
    row("--hysteresis", &A::hysteresis, "Overflows the dynamic loss scaler absorbs before it halves the scale"),
    row("--fp8-format", &A::fp8_format,
        "FP8 GEMMs in the transformer layers' linears: e4m3 (every operand E4M3) or hybrid (output gradients "
        "E5M2); per-tensor scales, FP32 accumulation, everything else in the model's dtype. Emulated exactly on "
        "the CPU backend (refused with --device cuda)")
        .dest("fp8")
        .shown(kNoneIfEmpty)
        .megatron(kImplementation,
                  "Transformer Engine's FP8 linears; the CPU backend emulates the casts and GEMMs, the CUDA backend "
                  "refuses FP8"),
    row("--fp8-recipe", &A::fp8_recipe,
        "tensorwise (each tensor scaled by its own amax) or delayed (by the amax history of earlier steps)")
        .megatron(kRefusedAtValues, "tensorwise and delayed; mxfp8 and blockwise are refused"),
    row("--fp8-margin", &A::fp8_margin, "Delayed scaling: scales divided by 2^margin"),
    row("--fp8-amax-history-len", &A::fp8_amax_history_len, "Delayed scaling: steps of amax history"),
    row("--fp8-amax-compute-algo", &A::fp8_amax_compute_algo, "Delayed scaling: most_recent or max over the history"),
    row("--no-fp8-wgrad", &A::no_fp8_wgrad, "Weight-gradient GEMMs in the model's dtype instead of FP8")
        .negated("fp8_wgrad"),
    row("--fp8-interval", &A::fp8_interval, "Only 1 (scales updated every step; deprecated in Megatron)")
        .megatron(kRefusedAtValues, "1; other values are refused (deprecated in Megatron)"),
    row("--seed", &A::seed, "Random seed (initialization and data order)").non_negative(),
    row("--deterministic-mode", &A::deterministic_mode,
        "Only bitwise reproducible algorithms (slower cuDNN attention backward)")
        .megatron(kImplementation),
    row("--attention-backend", &A::attention_backend,
        "auto, flash (as auto: exact attention, cuDNN's fused flash attention where it applies), fused (cuDNN "
        "fused attention), local or unfused (reference kernel)")
        .one_of(flag_enum_names<AttentionBackend>())
        .shown(attention_backend_value)
        .megatron(kImplementation,
                  "auto, flash, fused, local and unfused; flash runs what auto does (exact attention: cuDNN's fused "
                  "flash attention on the GPU where it applies, the reference kernel elsewhere), said in a start-up "
                  "note; fused needs the GPU"),
    row("--recompute-granularity", &A::recompute_granularity,
        "Activation recompute: full (whole layers) or selective (attention core)")
        .one_of(flag_enum_names<RecomputeGranularity>())
        .shown(kNoneIfEmpty),
    row("--recompute-method", &A::recompute_method,
        "With full: uniform (groups of --recompute-num-layers) or block (first --recompute-num-layers)")
        .shown(kNoneIfEmpty),
    row("--recompute-num-layers", &A::recompute_num_layers,
        "With full: layers per recompute group (uniform) or recomputed per stage (block)")
        .shown(kNoneIfZero),
    row("--recompute-activations", &A::recompute_activations, "Same as --recompute-granularity selective"),
    // ---- Megatron implementation choices --------------------------------------------------------
    // Flags that Megatron launch scripts pass on nearly every run to pick kernels, fusions or
    // Python-side housekeeping. Each has one meaning in this program, which its help says; the
    // values that ask for something this program cannot do are refused in validate_arguments
    // (validate_implementation_flags), never accepted and ignored.
    row("--transformer-impl", &A::transformer_impl,
        "local or transformer_engine (Megatron's default): both run this program's own kernels "
        "(cuBLASLt GEMMs, cuDNN fused attention, its norms), the same model and arithmetic either way")
        .megatron(kRefusedAtValues,
                  "local and transformer_engine both run this program's kernels; inference_optimized is refused"),
    row("--use-mcore-models", &A::use_mcore_models,
        "Accepted (Megatron's default; deprecated there): the model is Megatron-Core's GPT, with its "
        "parameter names")
        .dest("deprecated_use_mcore_models")
        .megatron(kImplementation),
    row("--no-gradient-accumulation-fusion", &A::no_gradient_accumulation_fusion,
        "Accepted: weight gradients are always accumulated in FP32 by the GEMM itself (the arithmetic of "
        "Megatron's fused path; its unfused path rounds each microbatch's weight gradient to the parameter "
        "type before adding it)")
        .negated("gradient_accumulation_fusion")
        .megatron(kImplementation),
    row("--attention-softmax-in-fp32", &A::attention_softmax_in_fp32,
        "Accepted: attention's scaling, causal mask and softmax always run in FP32 here")
        .megatron(kImplementation),
    row("--no-rope-fusion", &A::no_rope_fusion,
        "Accepted: RoPE is this program's own kernel, the same rotation as Megatron's fused or unfused one")
        .negated("apply_rope_fusion")
        .megatron(kImplementation),
    row("--manual-gc", &A::manual_gc,
        "Accepted: no garbage collector runs in this program (no Python), so there are no collection "
        "pauses to align across ranks")
        .megatron(kImplementation),
    row("--manual-gc-interval", &A::manual_gc_interval, "Accepted (>= 0): no garbage collector runs in this program")
        .non_negative()
        .megatron(kImplementation),
    row("--no-create-attention-mask-in-dataloader", &A::no_create_attention_mask_in_dataloader,
        "Accepted: the data pipeline never builds attention masks here (attention is causal inside the "
        "kernels), which is what this flag asks for")
        .negated("create_attention_mask_in_dataloader")
        .megatron(kImplementation),
    row("--no-mmap-bin-files", &A::no_mmap_bin_files,
        "Accepted: the .bin files are memory-mapped either way; the tokens read are the same (Megatron's "
        "flag changes only how they are read)")
        .negated("mmap_bin_files")
        .megatron(kImplementation),
    row("--use-flash-attn", &A::use_flash_attn,
        "Flash attention: what --attention-backend auto does (cuDNN's fused flash attention where it "
        "applies, the exact kernel elsewhere); refused with --attention-backend local or unfused")
        .megatron(kRefusedAtValues, "refused with --attention-backend local or unfused"),
    row("--no-masked-softmax-fusion", &A::no_masked_softmax_fusion,
        "Accepted: scale, causal mask and softmax give the same FP32 values as Megatron's unfused path")
        .negated("masked_softmax_fusion")
        .megatron(kImplementation),
    row("--no-bias-gelu-fusion", &A::no_bias_gelu_fusion,
        "The exact erf GeLU (PyTorch's F.gelu, Megatron's unfused path) instead of the tanh approximation of "
        "Megatron's fused bias-GeLU; no effect with --swiglu (as in Megatron)")
        .negated("bias_gelu_fusion"),
    row("--no-bias-dropout-fusion", &A::no_bias_dropout_fusion,
        "Accepted: bias, dropout and residual add give the same values fused or not (the dropout masks are "
        "this program's layout-independent ones either way)")
        .negated("bias_dropout_fusion")
        .megatron(kImplementation),
    row("--no-bias-swiglu-fusion", &A::no_bias_swiglu_fusion,
        "Accepted: SwiGLU is one FP32 kernel here, the formula of Megatron's fused and unfused paths")
        .negated("bias_swiglu_fusion")
        .megatron(kImplementation),
    row("--no-persist-layer-norm", &A::no_persist_layer_norm,
        "Accepted: Apex's persistent LayerNorm kernel is never used; the norms are this program's own")
        .megatron(kImplementation),
    row("--no-async-tensor-model-parallel-allreduce", &A::no_async_tensor_model_parallel_allreduce,
        "Accepted: tensor-parallel all-reduces of input gradients are not overlapped with the weight-gradient "
        "GEMMs here, which is what this flag asks for")
        .negated("async_tensor_model_parallel_allreduce")
        .megatron(kImplementation),
    row("--use-cpu-initialization", &A::use_cpu_initialization,
        "Accepted: parameters are always initialized on the host, from (seed, name, element index), and "
        "copied to the device: the same values in every parallel layout")
        .shown(kTrueOrNone)
        .megatron(kImplementation),
    row("--apply-query-key-layer-scaling", &A::apply_query_key_layer_scaling,
        "Accepted: scaling attention scores by 1 / layer number and back before the FP32 softmax is the "
        "identity; Megatron uses it for FP16's range (its FP16 scores before the softmax), and this program's "
        "attention forms the scores in FP32, under --fp16 too")
        .megatron(kImplementation),
    row("--accumulate-allreduce-grads-in-fp32", &A::accumulate_allreduce_grads_in_fp32,
        "Accepted: gradients are always accumulated and reduced across data-parallel ranks in FP32 (Megatron's "
        "default with --bf16)")
        .megatron(kImplementation),
    row("--ddp-average-in-collective", &A::ddp_average_in_collective,
        "Accepted: the gradient is the data-parallel mean either way; here each rank's loss is scaled by 1 / "
        "(DP x microbatches) before backward and the collective sums (Megatron's default path), which differs "
        "from an averaging collective only in FP32 rounding")
        .megatron(kImplementation),
    row("--defer-embedding-wgrad-compute", &A::defer_embedding_wgrad_compute,
        "Accepted: Megatron defers the output layer's weight-gradient GEMMs of the last pipeline stage to the "
        "pipeline flush to hide it; here they run in each microbatch's backward (or as the pipeline schedule "
        "defers weight gradients); the gradient is the same sum over microbatches")
        .megatron(kImplementation),
    row("--wgrad-deferral-limit", &A::wgrad_deferral_limit,
        "With --defer-embedding-wgrad-compute (>= 0): microbatches whose output-layer weight gradient Megatron "
        "defers; accepted, as that flag")
        .non_negative()
        .megatron(kImplementation),
    row("--overlap-param-gather-with-optimizer-step", &A::overlap_param_gather_with_optimizer_step,
        "Accepted with --use-distributed-optimizer and --overlap-param-gather (Megatron's rule): Megatron starts "
        "the first model chunk's parameter all-gather inside the optimizer step; here the all-gathers of "
        "--overlap-param-gather overlap the next forward; the parameters are the same")
        .megatron(kImplementation),
    row("--check-weight-hash-across-dp-replicas-interval", &A::check_weight_hash_across_dp_replicas_interval,
        "Every N iterations, check that the data-parallel replicas hold the same parameters (a hash of each "
        "rank's parameters); replicas that differ stop the run, naming the ranks")
        .shown(kNoneIfZero),
    row("--test-mode", &A::test_mode,
        "Megatron's real-time tests: with --qk-layernorm, before the first iteration and after each, every "
        "tensor-, data- and context-parallel rank of a pipeline stage must hold the same q_layernorm / "
        "k_layernorm parameters (a hash of them), or the run stops naming the ranks (Megatron's "
        "run_realtime_tests); without --qk-layernorm it checks nothing, as Megatron"),
    row("--disable-gloo-process-groups", &A::disable_gloo_process_groups,
        "Accepted: this program creates no Gloo process groups (its host-side agreements run on MPI)")
        .megatron(kImplementation),
    row("--empty-unused-memory-level", &A::empty_unused_memory_level,
        "0, 1 or 2, accepted: device memory is one arena taken before the first iteration and never freed, "
        "so there is no allocator cache to empty at any level")
        .in_range(0, 2)
        .megatron(kImplementation),
    row("--no-check-for-nan-in-loss-and-grad", &A::no_check_for_nan_in_loss_and_grad,
        "Do not stop the run at a non-finite loss or gradient norm (Megatron's check, on by default): "
        "an iteration whose gradient norm is not finite skips its update on every rank (as Megatron's "
        "loss scaler does) and is counted in the log line as skipped, a non-finite loss as a nan iteration")
        .negated("check_for_nan_in_loss_and_grad")
        .megatron(
            kImplementation,
            "without the check a non-finite gradient norm skips that iteration's update on every rank (Megatron "
            "skips only under FP16 loss scaling) and is counted as skipped; a non-finite loss as a nan iteration"),
    row("--calculate-per-token-loss", &A::calculate_per_token_loss,
        "Accepted: every token counts here (no loss mask), so each microbatch has the same token count and "
        "the per-token mean over the global batch equals Megatron's default mean of microbatch means; the "
        "gradient and the logged loss are that mean either way"),
    row("--cross-entropy-loss-fusion", &A::cross_entropy_loss_fusion,
        "Accepted: the vocabulary-parallel cross entropy is always one fused FP32 kernel here (statistics and "
        "gradient from the logits, no probability tensor), Megatron's fused path's arithmetic")
        .megatron(kImplementation),
    row("--cross-entropy-fusion-impl", &A::cross_entropy_fusion_impl,
        "native or te: either runs this program's fused cross-entropy kernel")
        .one_of(kCrossEntropyFusionImpls)
        .megatron(kImplementation, "native and te both run this program's fused FP32 cross-entropy kernel"),
    row("--num-workers", &A::num_workers,
        "Accepted (>= 0): Megatron's data-loader worker processes; here the training process reads each "
        "batch from the memory-mapped dataset itself, the same samples for any number")
        .non_negative()
        .megatron(kImplementation),
    row("--rampup-batch-size", &A::rampup_batch_size,
        "START INCREMENT SAMPLES: the global batch size starts at START and grows by INCREMENT every SAMPLES / n "
        "consumed samples (n = (--global-batch-size - START) / INCREMENT) up to --global-batch-size; needs "
        "--train-samples")
        .shown(rampup_value)
        .megatron(kImplementation,
                  "Megatron's head deprecates it and ignores it (a warning); here it ramps as Megatron's "
                  "RampupBatchsizeNumMicroBatchesCalculator did until its replacement by --step-batch-size-schedule "
                  "(the iterations, learning-rate samples, data order and checkpoints follow the consumed samples)")
        .takes(Nargs::kThree),
    row("--step-batch-size-schedule", &A::step_batch_size_schedule,
        "\"THRESHOLD:BATCH ...\" (K, M, B, T suffixes): the global batch size of the last threshold reached, "
        "thresholds in tokens (samples x --seq-length); instead of --global-batch-size")
        .shown(kNoneIfEmpty),
    // ---- end of Megatron implementation choices -------------------------------------------------
};
static_assert(rows_are_consistent(kRows),
              "train/flag_rows_training.cc: a flag or field twice, a rule on a field of another type, "
              "a list without its Nargs, or a refusal without a reason");

}  // namespace

std::span<const FlagRow> training_flag_rows() { return kRows; }

}  // namespace gpt
