#include "train/flag_table.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <type_traits>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "train/context_parallel_arguments.h"
#include "train/flag_agreement_order.h"
#include "train/report/metrics_file.h"
#include "train/numeric_flags.h"

namespace gpt {
namespace {

using A = Arguments;
using enum FlagStatus;
using enum PyRule;

constexpr FlagRow row(std::string_view flag, ArgumentField field, std::string_view help) {
  return FlagRow{.flag = flag, .field = field, .help = help};
}

PyValue none_if_zero(int64_t value) { return value == 0 ? PyValue() : PyValue(value); }

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
// Megatron's --hierarchical-context-parallel-sizes is a list of ints (nargs '+', type int): [2, 2].
PyValue hierarchical_sizes_value(const Arguments& a) {
  if (a.hierarchical_context_parallel_sizes.empty()) return PyValue();
  const absl::StatusOr<std::vector<int64_t>> sizes = hierarchical_context_parallel_sizes(a);
  if (!sizes.ok()) return a.hierarchical_context_parallel_sizes;  // as given (validation refuses it)
  return absl::StrCat("[", absl::StrJoin(*sizes, ", "), "]");
}
// Megatron's --attention-backend is an enum, printed with its class name.
PyValue attention_backend_value(const Arguments& a) { return absl::StrCat("AttnBackend.", a.attention_backend); }

// One row per flag, in --help's order. A flag's checks are in validate_arguments (train/arguments.cc
// and the validate_* functions it calls); the row says what the flag is.
constexpr FlagRow kRows[] = {
    // Model.
    row("--num-layers", &A::num_layers, "Number of transformer layers"),
    row("--hidden-size", &A::hidden_size, "Transformer hidden size"),
    row("--ffn-hidden-size", &A::ffn_hidden_size, "MLP hidden size (default 4 * hidden size)").shown(kNoneIfZero),
    row("--num-attention-heads", &A::num_attention_heads, "Number of attention heads"),
    row("--kv-channels", &A::kv_channels, "Head dimension (default hidden size / heads)").shown(kNoneIfZero),
    row("--seq-length", &A::seq_length, "Sequence length"),
    row("--max-position-embeddings", &A::max_position_embeddings, "Learned position embeddings"),
    row("--make-vocab-size-divisible-by", &A::make_vocab_size_divisible_by,
        "Pad the vocabulary to a multiple of this times TP"),
    row("--untie-embeddings-and-output-weights", &A::untie_embeddings_and_output_weights,
        "Separate output layer instead of the tied word embedding"),
    row("--init-method-std", &A::init_method_std, "Standard deviation of weight initialization"),
    row("--norm-epsilon", &A::norm_epsilon, "LayerNorm epsilon"),
    row("--hidden-dropout", &A::hidden_dropout,
        "Dropout after the attention projection and the MLP (masks depend only on the seed, iteration, "
        "sample, layer and element, so every parallel layout drops the same elements)")
        .megatron(kImplementation,
                  "Megatron's default and meaning; the masks are layout-independent (see --attention-dropout)"),
    row("--attention-dropout", &A::attention_dropout, "Dropout of the attention probabilities (same masks)")
        .megatron(
            kImplementation,
            "Megatron's default and meaning; the masks are a function of (seed, iteration, layer, sample, element), "
            "the same in every layout, and so differ from Megatron's own"),
    row("--position-embedding-type", &A::position_embedding_type,
        "learned_absolute, rope (rotary; no learned position embedding) or none")
        .megatron(kRefusedAtValues, "learned_absolute, rope and none; relative, mrope and yarn are refused"),
    row("--no-position-embedding", &A::no_position_embedding,
        "No learned absolute position embedding (with learned_absolute: none; rope never has one)")
        .negated("add_position_embedding"),
    row("--rotary-percent", &A::rotary_percent, "Fraction of each head's dimensions that RoPE rotates"),
    row("--rotary-base", &A::rotary_base, "RoPE frequency base").shown(kIntIfIntegral),
    row("--rotary-interleaved", &A::rotary_interleaved,
        "RoPE rotates the pairs (2j, 2j + 1) of each head instead of (j, j + rotary_dim / 2)"),
    row("--normalization", &A::normalization, "LayerNorm or RMSNorm"),
    row("--swiglu", &A::swiglu, "SwiGLU MLP (default --ffn-hidden-size: int(8h/3 / 64) * 64, as Megatron)"),
    row("--group-query-attention", &A::group_query_attention, "Grouped-query attention"),
    row("--num-query-groups", &A::num_query_groups, "Key/value head groups with --group-query-attention"),
    row("--disable-bias-linear", &A::disable_bias_linear,
        "No biases in the QKV, projection and MLP linears (with a GeLU MLP: the exact erf GeLU, as Megatron, "
        "whose bias-GeLU fusion then turns off)")
        .negated("add_bias_linear"),
    row("--apply-layernorm-1p", &A::apply_layernorm_1p,
        "Every LayerNorm / RMSNorm scales by 1 + weight, its weight stored zero-centred and initialised to 0 "
        "(Megatron's layernorm_zero_centered_gamma, Transformer Engine's zero_centered_gamma)")
        .dest("layernorm_zero_centered_gamma"),
    row("--squared-relu", &A::squared_relu,
        "MLP activation relu(x)^2 instead of GeLU (refused with --swiglu, as Megatron's assertion)"),
    row("--qk-layernorm", &A::qk_layernorm,
        "Each query and key head normalized over its kv_channels dims before RoPE by the model's "
        "--normalization (Megatron's q_layernorm / k_layernorm: one weight, and LayerNorm bias, for the "
        "queries and one for the keys per layer, shared by the heads, their gradients summed over TP)"),
    // Parallelism.
    row("--tensor-model-parallel-size", &A::tensor_model_parallel_size, "Tensor-parallel size"),
    row("--pipeline-model-parallel-size", &A::pipeline_model_parallel_size, "Pipeline-parallel size"),
    row("--num-layers-per-virtual-pipeline-stage", &A::num_layers_per_virtual_pipeline_stage,
        "Layers per virtual stage (interleaved 1F1B schedule)")
        .shown(kNoneIfZero),
    row("--num-virtual-stages-per-pipeline-rank", &A::num_virtual_stages_per_pipeline_rank,
        "Model chunks per pipeline rank (interleaved 1F1B schedule)")
        .shown(kNoneIfZero),
    row("--decoder-first-pipeline-num-layers", &A::decoder_first_pipeline_num_layers,
        "Transformer layers of the first pipeline stage (its chunks' share with interleaving); the other "
        "stages split the rest evenly")
        .shown(kNoneIfZero),
    row("--decoder-last-pipeline-num-layers", &A::decoder_last_pipeline_num_layers,
        "Transformer layers of the last pipeline stage (its chunks' share with interleaving); the other stages "
        "split the rest evenly")
        .shown(kNoneIfZero),
    row("--account-for-embedding-in-pipeline-split", &A::account_for_embedding_in_pipeline_split,
        "Count the embedding as one layer when splitting the layers over pipeline stages (the first virtual "
        "stage builds one transformer layer fewer)"),
    row("--account-for-loss-in-pipeline-split", &A::account_for_loss_in_pipeline_split,
        "Count the loss (output layer) as one layer when splitting the layers over pipeline stages (the last "
        "virtual stage builds one transformer layer fewer)"),
    row("--microbatch-group-size-per-virtual-pipeline-stage", &A::microbatch_group_size_per_vp_stage,
        "Interleaved schedule: microbatches each model chunk runs in a row, forward and backward (Megatron's "
        "microbatch_group_size_per_vp_stage; default --pipeline-model-parallel-size, the depth-first order). "
        "Megatron's rules: between PP and the number of microbatches, which it need not divide, but the last group's remainder "
        "is 0 or at least PP. Without model chunks it groups nothing, as in Megatron; refused with --pipeline-schedule "
        "zb-h1, zb-v and auto")
        .dest("microbatch_group_size_per_vp_stage")
        .shown(kNoneIfZero),
    row("--overlap-p2p-communication-warmup-flush", &A::overlap_p2p_comm_warmup_flush,
        "Accepted with the interleaved schedule (refused without model chunks, as Megatron refuses it): Megatron "
        "posts the warm-up and flush receives one iteration early to overlap them with compute; the compute order "
        "and every number are the same either way, and here each iteration's transfers are posted as one batch "
        "after its compute and waited for before the next")
        .megatron(kImplementation),
    row("--pipeline-schedule", &A::pipeline_schedule,
        "1f1b, interleaved (with model chunks), zb-h1 (zero bubble: each backward split into its input and "
        "weight gradients, the weight gradients filling 1F1B's bubble; one model chunk per rank) or zb-v (zero "
        "bubble with two model chunks per rank placed in a V, the loss on the first rank) or auto (the "
        "fastest of the layout's schedules in simulation whose memory plan fits, said at start-up); default: "
        "interleaved with model chunks, else 1f1b (not a Megatron flag)")
        .shown(kNoneIfEmpty)
        .megatron(kOwn),
    row("--pipeline-schedule-costs", &A::pipeline_schedule_costs,
        "With --pipeline-schedule auto: the F, B and W costs measured in this metrics file's last pipeline "
        "timeline (written with --timing-log-level 2) instead of FLOP counts (not a Megatron flag)")
        .shown(kNoneIfEmpty)
        .megatron(kOwn),
    row("--sequence-parallel", &A::sequence_parallel, "Split activations along the sequence across TP"),
    row("--context-parallel-size", &A::context_parallel_size,
        "Context-parallel size: each sequence split over this many ranks (2 CP load-balanced chunks, rank r "
        "holding chunks r and 2 CP - 1 - r)"),
    // Each occurrence replaces the list (argparse's nargs='+').
    row("--cp-comm-type", &A::cp_comm_type,
        "How attention crosses the context-parallel ranks: p2p (ring, K/V blocks passed around), a2a "
        "(all-to-all over heads) or a2a+p2p (all-to-all over level 0 of --hierarchical-context-parallel-sizes, "
        "then the ring over level 1); one value for every layer or one per layer")
        .takes(Nargs::kOneOrMore)
        .megatron(kRefusedAtValues, "p2p, a2a and a2a+p2p; allgather is refused"),
    // Each occurrence replaces the list (argparse's nargs='+').
    row("--hierarchical-context-parallel-sizes", &A::hierarchical_context_parallel_sizes,
        "The two levels [A, P] of the context-parallel group for --cp-comm-type a2a+p2p (A x P = "
        "--context-parallel-size): A consecutive context ranks exchange heads by all-to-all, the P ranks at one "
        "place of those groups form the ring (Megatron's hierarchical groups); written 2 2, [2 2] or 2,2")
        .takes(Nargs::kOneOrMore)
        .shown(hierarchical_sizes_value)
        .megatron(kRefusedAtValues, "two levels, as Transformer Engine's a2a+p2p uses; other counts are refused"),
    row("--use-tp-pp-dp-mapping", &A::use_tp_pp_dp_mapping,
        "Rank order tp-cp-ep-pp-dp instead of tp-cp-ep-dp-pp: rank = tp + TP (cp + CP (pp + PP dp)), so a "
        "replica's pipeline stages are neighbouring ranks (changes which ranks talk, never the numbers)"),
    row("--expert-tensor-parallel-size", &A::expert_tensor_parallel_size,
        "Tensor-parallel size of the expert (MoE) layers (default --tensor-model-parallel-size). This program's "
        "models have no expert layers, so, as in Megatron for a dense model, no parameter uses the expert groups: "
        "checked as Megatron checks it (world divisible by it x --pipeline-model-parallel-size; without the "
        "pipeline-last rank order and with PP > 1, world / (it x PP) equal to the data-parallel size), a start-up "
        "note when it differs from TP")
        .shown(kNoneIfZero),
    row("--use-distributed-optimizer", &A::use_distributed_optimizer, "Shard optimizer state across DP (ZeRO-1)"),
    row("--overlap-grad-reduce", &A::overlap_grad_reduce, "Overlap gradient reduction with backward"),
    row("--overlap-param-gather", &A::overlap_param_gather,
        "Overlap parameter all-gather with forward (ZeRO-3: prefetch the next unit's gather while one computes)"),
    row("--ddp-bucket-size", &A::ddp_bucket_size,
        "Elements per gradient bucket with --overlap-grad-reduce (default max(4e7, 1e6 x DP))")
        .shown(kNoneIfZero),
    row("--num-distributed-optimizer-instances", &A::num_distributed_optimizer_instances,
        "With --use-distributed-optimizer: split the data-parallel (x context-parallel) group into this many "
        "instances of consecutive ranks, each holding a full copy of the optimizer state sharded over its own "
        "ranks; gradients reduce-scattered inside an instance, then all-reduced across instances")
        .megatron(kRefusedAtValues,
                  "with --use-distributed-optimizer; with --use-megatron-fsdp or --use-torch-fsdp2 (Megatron-FSDP's "
                  "hybrid sharding, HSDP) refused: this program does not build hybrid sharding"),
    row("--use-megatron-fsdp", &A::use_megatron_fsdp,
        "Megatron-FSDP: shard data-parallel state at --data-parallel-sharding-strategy's level, reduced and "
        "gathered per communication unit (a layer, the embedding, the output layer)"),
    row("--use-torch-fsdp2", &A::use_torch_fsdp2,
        "PyTorch FSDP2 (Megatron's fully_shard wrapper): parameters, gradients and optimizer state sharded over "
        "data parallelism, each transformer layer (and the embedding, the output layer) gathered before use")
        .megatron(kImplementation,
                  "sharded as this program's ZeRO-3 (--data-parallel-sharding-strategy optim_grads_params) with the "
                  "next unit's gather prefetched, FSDP2's default; Megatron's rules for the flag apply (no pipeline "
                  "parallelism, no distributed optimizer, --no-gradient-accumulation-fusion, untied embeddings, no "
                  "--fp16, --ckpt-format torch_dist or torch_dcp)"),
    row("--data-parallel-sharding-strategy", &A::data_parallel_sharding_strategy,
        "With --use-megatron-fsdp: no_shard (ZeRO-0), optim (ZeRO-1), optim_grads (ZeRO-2: each rank keeps the "
        "gradient sum of its shard only) or optim_grads_params (ZeRO-3: parameters too, each unit gathered "
        "before its forward, recompute and backward)")
        .megatron(kImplementation,
                  "all four levels; under optim_grads_params a released unit stays gathered until its working "
                  "buffer is needed for another (docs/DATA_PARALLEL.md)"),
    row("--megatron-fsdp-main-params-dtype", &A::megatron_fsdp_main_params_dtype,
        "With --use-megatron-fsdp: the dtype of the main (master) parameters: fp32")
        .megatron(kRefusedAtValues, "fp32, and auto in FP32 training; the optimizer here always keeps FP32 master "
                                    "weights"),
    row("--megatron-fsdp-main-grads-dtype", &A::megatron_fsdp_main_grads_dtype,
        "With --use-megatron-fsdp: the dtype of the main gradients: fp32")
        .megatron(kRefusedAtValues, "fp32, and auto in FP32 training; main gradients are always FP32 here, also "
                                    "under --bf16, where Megatron's default auto keeps them in BF16"),
    row("--megatron-fsdp-grad-comm-dtype", &A::megatron_fsdp_grad_comm_dtype,
        "With --use-megatron-fsdp: the dtype gradients are reduced in: fp32")
        .megatron(kRefusedAtValues, "fp32, and auto in FP32 training; gradients are always reduced in FP32 here"),
    row("--suggested-communication-unit-size", &A::suggested_communication_unit_size,
        "With --use-megatron-fsdp: elements per reduction unit; consecutive units (layers, embedding, output "
        "layer) are merged until a unit holds at least this many (default: one unit each)")
        .shown(kNoneIfZero),
    row("--optimizer-cpu-offload", &A::optimizer_cpu_offload,
        "Keep the optimizer state (FP32 master weights, moments) of --optimizer-offload-fraction of the owned "
        "elements in host memory and run their AdamW step on the host's cores (needs a distributed optimizer and "
        "--use-precision-aware-optimizer)"),
    row("--optimizer-offload-fraction", &A::optimizer_offload_fraction,
        "With --optimizer-cpu-offload: the fraction of the owned optimizer state in host memory, in [0, 1]"),
    row("--overlap-cpu-optimizer-d2h-h2d", &A::overlap_cpu_optimizer_d2h_h2d,
        "With --optimizer-cpu-offload: pipeline the offloaded state's step part by part (a bucket's gradients "
        "copied device-to-host and the previous bucket's parameters host-to-device, on their own stream, while "
        "the host steps the bucket between)"),
    row("--use-precision-aware-optimizer", &A::use_precision_aware_optimizer,
        "The optimizer holds its FP32 master weights and moments itself (Megatron requires it with "
        "--optimizer-cpu-offload)")
        .megatron(kImplementation,
                  "the optimizer here always keeps FP32 master weights and FP32 moments, Megatron's defaults with "
                  "this flag; its lower-precision state (--main-params-dtype, --exp-avg-dtype, ...) is not offered"),
    row("--fsdp-double-buffer", &A::fsdp_double_buffer,
        "With --use-megatron-fsdp: one more fixed unit-sized gradient buffer, so that a unit's reduce-scatter "
        "runs while the next unit computes (implied by --overlap-grad-reduce), and under ZeRO-3 one more "
        "gathered-parameter buffer (implied by --overlap-param-gather)")
        .megatron(kImplementation,
                  "every communication buffer here is allocated once at start-up; the flag adds the second "
                  "alternating unit buffer (Megatron's double buffer) also without --overlap-grad-reduce"),
    row("--distributed-backend", &A::distributed_backend,
        "nccl, mpi, or gloo (Megatron's CPU backend; runs on this program's MPI communicator)")
        .shown(kNoneIfEmpty)
        .megatron(kRefusedAtValues,
                  "nccl (needs a GPU) and mpi; gloo runs on the MPI communicator, said in one note at start-up"),
    row("--distributed-timeout-minutes", &A::distributed_timeout_minutes, "Bound on every collective wait")
        .shown(kIntIfIntegral),
    // Training.
    row("--micro-batch-size", &A::micro_batch_size, "Samples per microbatch per data-parallel rank"),
    row("--global-batch-size", &A::global_batch_size, "Samples per iteration over all ranks").shown(kNoneIfZero),
    row("--train-iters", &A::train_iters, "Iterations to train (or --train-samples)").shown(train_iters_value),
    row("--train-samples", &A::train_samples,
        "Samples to train, instead of --train-iters: floor(samples / --global-batch-size) iterations, "
        "the learning-rate schedule counted in samples (as Megatron)")
        .shown(kNoneIfZero),
    row("--lr", &A::lr, "Peak learning rate"),
    row("--min-lr", &A::min_lr, "Learning rate at the end of decay"),
    row("--decoupled-lr", &A::decoupled_lr,
        "Peak learning rate of the word embedding and the output layer weight (Megatron's "
        "is_embedding_or_output_parameter; not the position embedding), on the same warmup and decay")
        .shown(kNoneIfNegative),
    row("--decoupled-min-lr", &A::decoupled_min_lr,
        "With --decoupled-lr: their minimum learning rate (default --min-lr)")
        .shown(kNoneIfNegative),
    row("--lr-decay-style", &A::lr_decay_style, "constant, linear or cosine")
        .megatron(kRefusedAtValues, "constant, linear and cosine; inverse-square-root and WSD are refused"),
    row("--lr-decay-iters", &A::lr_decay_iters, "Iterations to decay over (default --train-iters)")
        .shown(lr_decay_iters_value),
    row("--lr-decay-samples", &A::lr_decay_samples,
        "With --train-samples: samples to decay over (default --train-samples)")
        .shown(kNoneIfZero),
    row("--lr-warmup-iters", &A::lr_warmup_iters, "Iterations of linear warmup"),
    row("--lr-warmup-samples", &A::lr_warmup_samples, "With --train-samples: samples of linear warmup"),
    row("--lr-warmup-fraction", &A::lr_warmup_fraction,
        "Warmup as a fraction of the decay iterations or samples (fractional samples kept, as Megatron)")
        .shown(kNoneIfNegative),
    row("--weight-decay", &A::weight_decay, "AdamW weight decay"),
    row("--apply-wd-to-qk-layernorm", &A::apply_wd_to_qk_layernorm,
        "Weight decay on --qk-layernorm's weights and biases too (by default, as every 1-D parameter and "
        "bias, they take none); without --qk-layernorm it changes nothing, as Megatron"),
    row("--clip-grad", &A::clip_grad, "Clip gradients to this global L2 norm (0: off)"),
    row("--adam-beta1", &A::adam_beta1, "Adam beta1"),
    row("--adam-beta2", &A::adam_beta2, "Adam beta2"),
    row("--adam-eps", &A::adam_eps, "Adam epsilon"),
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
    row("--fp8-amax-compute-algo", &A::fp8_amax_compute_algo,
        "Delayed scaling: most_recent or max over the history"),
    row("--no-fp8-wgrad", &A::no_fp8_wgrad, "Weight-gradient GEMMs in the model's dtype instead of FP8")
        .negated("fp8_wgrad"),
    row("--fp8-interval", &A::fp8_interval, "Only 1 (scales updated every step; deprecated in Megatron)")
        .megatron(kRefusedAtValues, "1; other values are refused (deprecated in Megatron)"),
    row("--seed", &A::seed, "Random seed (initialization and data order)"),
    row("--deterministic-mode", &A::deterministic_mode,
        "Only bitwise reproducible algorithms (slower cuDNN attention backward)")
        .megatron(kImplementation),
    row("--attention-backend", &A::attention_backend,
        "auto, flash (as auto: exact attention, cuDNN's fused flash attention where it applies), fused (cuDNN "
        "fused attention), local or unfused (reference kernel)")
        .shown(attention_backend_value)
        .megatron(kImplementation,
                  "auto, flash, fused, local and unfused; flash runs what auto does (exact attention: cuDNN's fused "
                  "flash attention on the GPU where it applies, the reference kernel elsewhere), said in a start-up "
                  "note; fused needs the GPU"),
    row("--recompute-granularity", &A::recompute_granularity,
        "Activation recompute: full (whole layers) or selective (attention core)")
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
        .megatron(kImplementation, "native and te both run this program's fused FP32 cross-entropy kernel"),
    row("--num-workers", &A::num_workers,
        "Accepted (>= 0): Megatron's data-loader worker processes; here the training process reads each "
        "batch from the memory-mapped dataset itself, the same samples for any number")
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
    // Data.
    row("--mock-data", &A::mock_data, "Synthetic data, no files needed"),
    row("--vocab-size", &A::vocab_size, "Vocabulary size for --mock-data or --tokenizer-type NullTokenizer")
        .shown(kNoneIfZero),
    // Each occurrence replaces the list (argparse's nargs='*' keeps the last occurrence's values).
    row("--data-path", &A::data_path, "Dataset prefix, or weight prefix pairs to blend")
        .shown(kNoneIfEmpty)
        .takes(Nargs::kOneOrMore),
    row("--split", &A::split, "Train/valid/test proportions of the documents"),
    row("--vocab-file", &A::vocab_file, "GPT-2 vocab.json").shown(kNoneIfEmpty),
    row("--merge-file", &A::merge_file, "GPT-2 merges.txt").shown(kNoneIfEmpty),
    row("--tokenizer-type", &A::tokenizer_type,
        "GPT2BPETokenizer, NullTokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer or HuggingFaceTokenizer")
        .shown(kNoneIfEmpty)
        .megatron(kRefusedAtValues,
                  "GPT2BPETokenizer, NullTokenizer, SentencePieceTokenizer, GPTSentencePieceTokenizer and "
                  "HuggingFaceTokenizer (byte-level BPE tokenizer.json files; docs/DATA.md); the BERT, Llama2, "
                  "TikToken, multimodal and SFT tokenizers are refused"),
    row("--tokenizer-model", &A::tokenizer_model,
        "SentencePiece model (SentencePieceTokenizer, GPTSentencePieceTokenizer), or a Hugging Face tokenizer.json "
        "or its directory (HuggingFaceTokenizer)")
        .shown(kNoneIfEmpty),
    row("--data-cache-path", &A::data_cache_path, "Directory for cached dataset indices").shown(kNoneIfEmpty),
    row("--device", &A::device, "auto, cpu or cuda (not a Megatron flag)").megatron(kOwn),
    // Evaluation and logging.
    row("--eval-interval", &A::eval_interval, "Iterations between evaluations on the validation split"),
    row("--eval-iters", &A::eval_iters, "Global batches per evaluation (0: no evaluation)"),
    row("--log-interval", &A::log_interval, "Iterations between log lines"),
    row("--log-throughput", &A::log_throughput,
        "Log the throughput per GPU (TFLOP/s, Megatron's formula) and, a field of this program's, tokens/s "
        "per GPU")
        .megatron(
            kImplementation,
            "Megatron's TFLOP/s field (its formula, attention term not halved), followed by a tokens/s/GPU field of "
            "this program's"),
    row("--log-params-norm", &A::log_params_norm, "Log the L2 norm of the (FP32 main) parameters"),
    row("--log-num-zeros-in-grad", &A::log_num_zeros_in_grad, "Log the number of zero gradient elements"),
    row("--rerun-mode", &A::rerun_mode,
        "disabled, validate_results (a NaN, Inf or, with --check-for-spiky-loss, spiky local loss reruns the "
        "iteration: not reproduced, exit 17 (resume from the last checkpoint); reproduced, report the samples, save and exit 16 for a rerun "
        "on another node, or skip the update under --no-check-for-nan-in-loss-and-grad) or report_stats (rerun "
        "every iteration, report the difference); default disabled (Megatron's: validate_results)")
        .megatron(kImplementation,
                  "Megatron's rerun state machine on the local loss (NaN, Inf, spiky) with its exit codes 16 and 17 "
                  "and its second stage from the checkpoint; the machine's state is kept as checkpoint records, and a "
                  "reproduced NaN may be skipped under --no-check-for-nan-in-loss-and-grad. The default is disabled "
                  "(Megatron's is validate_results): give --rerun-mode validate_results for Megatron's behaviour"),
    row("--check-for-spiky-loss", &A::check_for_spiky_loss,
        "Reject a local loss at least 10 times the largest of the first 100 (not fatal: rerun, then continue)"),
    row("--error-injection-rate", &A::error_injection_rate,
        "With --rerun-mode validate_results: reject one in this many result validations (each microbatch's NaN and "
        "Inf checks, and the spike check) regardless of its value, to exercise the rerun machine; 0: none")
        .megatron(kImplementation,
                  "Megatron's injection: each validation call of an iteration's first run (not a run's first "
                  "iteration) rejected with probability 1/rate, then the diagnosis of --error-injection-type with "
                  "Megatron's exit codes; the draws are a hash of --seed, the rank, the iteration and the call instead "
                  "of Python's random. Refused where nothing is validated (another --rerun-mode, or "
                  "--no-check-for-nan-in-loss-and-grad without --check-for-spiky-loss), which Megatron ignores"),
    row("--error-injection-type", &A::error_injection_type,
        "The injected rejection's diagnosis: transient_error (the rerun differs), persistent_error (the rerun "
        "matches, the second rerun on another device differs) or correct_result (both match)"),
    row("--log-straggler", &A::log_straggler,
        "Every --log-interval iterations rank 0 prints the ranks with the shortest and longest compute time "
        "(forward-backward) and lowest and highest estimated throughput, with their nodes")
        .megatron(kImplementation,
                  "Megatron's MnRtt/MxRtt/MnEtpt/MxEtpt fields and its Bottom/Top lines, each rank with its node; "
                  "no GPU power, temperature, utilization or clock fields, no data-loading time (DRtt)"),
    row("--straggler-minmax-count", &A::straggler_minmax_count,
        "With --log-straggler: also list this many ranks with the lowest and the highest throughput"),
    row("--save", &A::save, "Directory for checkpoints").shown(kNoneIfEmpty),
    row("--save-interval", &A::save_interval, "Iterations between checkpoints").shown(kNoneIfZero),
    row("--load", &A::load, "Directory to resume from (its latest_checkpointed_iteration.txt)").shown(kNoneIfEmpty),
    row("--ckpt-step", &A::ckpt_step, "Iteration to load instead of the tracker's").shown(kNoneIfNegative),
    row("--no-load-optim", &A::no_load_optim, "Do not load the optimizer state").shown(kTrueOrNone),
    row("--no-load-rng", &A::no_load_rng, "Do not load the random state (use --seed)").shown(kTrueOrNone),
    row("--no-save-optim", &A::no_save_optim, "Do not save the optimizer state").shown(kTrueOrNone),
    row("--finetune", &A::finetune, "Load parameters only; start at iteration 0"),
    row("--ckpt-format", &A::ckpt_format,
        "torch_dist (default), torch, torch_dcp, fsdp_dtensor or hdf5: checkpoints are this program's sharded "
        "HDF5 format whichever is named (sharded by tensor slice, loadable into any parallel layout, async with "
        "--async-save); a start-up note says so")
        .megatron(kImplementation,
                  "torch_dist, torch, torch_dcp, fsdp_dtensor (and hdf5): the files are this program's sharded HDF5 "
                  "format in every case (sharded, reshardable across TP/PP/DP, async), said in one start-up note; "
                  "docs/CHECKPOINTS.md"),
    row("--async-save", &A::async_save, "Write checkpoints in a background thread from a host copy")
        .megatron(kImplementation, "the writer is a background thread from a host copy (Megatron's uses processes)"),
    row("--use-persistent-ckpt-worker", &A::use_persistent_ckpt_worker, "Accepted with --async-save")
        .megatron(kImplementation),
    row("--async-strategy", &A::async_strategy,
        "nvrx or mcore: with --async-save either runs this program's background writer thread")
        .megatron(kImplementation, "nvrx and mcore both run the background writer thread of --async-save"),
    row("--dist-ckpt-optim-fully-reshardable", &A::dist_ckpt_optim_fully_reshardable,
        "Accepted: the optimizer state is always saved as slices of each parameter's global tensor, so it loads "
        "into any TP/PP/DP layout, with or without --use-distributed-optimizer")
        .megatron(kImplementation),
    row("--ckpt-fully-parallel-load", &A::ckpt_fully_parallel_load,
        "Accepted: every rank always reads only the slices it holds, all ranks at once (no rank reads for "
        "another and broadcasts)")
        .megatron(kImplementation),
    row("--ckpt-fully-parallel-save", &A::ckpt_fully_parallel_save,
        "The default (Megatron's deprecated spelling): the pieces every data-parallel replica holds are written "
        "by the replicas in turn, spread by a hash of the key")
        .dest("ckpt_fully_parallel_save_deprecated"),
    row("--no-ckpt-fully-parallel-save", &A::no_ckpt_fully_parallel_save,
        "The pieces every data-parallel replica holds are written by data-parallel rank 0 alone")
        .negated("ckpt_fully_parallel_save"),
    row("--ckpt-assume-constant-structure", &A::ckpt_assume_constant_structure,
        "Accepted: Megatron caches its save plan across saves; no plan is cached here, each save lists its "
        "pieces again, and the files written are the same")
        .megatron(kImplementation),
    row("--verify-integrity", &A::verify_integrity,
        "Accepted: every checkpoint here carries checksums of its tensor chunks, shards and metadata, written on "
        "save and verified on load (docs/CHECKPOINTS.md, Integrity), with or without the flag")
        .megatron(kImplementation),
    row("--async-ckpt-use-cpu-shm", &A::async_ckpt_use_cpu_shm,
        "Accepted with --async-save: the host copy the writer thread reads is this process's memory (no "
        "worker process to share it with)")
        .megatron(kImplementation),
    row("--auto-detect-ckpt-format", &A::auto_detect_ckpt_format,
        "Accepted: --load always reads the checkpoint's format from its files (this program's HDF5 one; "
        "anything else is refused naming the file)")
        .megatron(kImplementation),
    row("--save-retain-interval", &A::save_retain_interval,
        "Keep the checkpoints of iterations that are multiples of N, and the latest; a save deletes the previous "
        "checkpoint otherwise")
        .shown(kNoneIfZero),
    row("--use-checkpoint-opt_param-scheduler", &A::use_checkpoint_opt_param_scheduler,
        "On resume, continue with the checkpoint's learning-rate schedule and weight decay instead of the "
        "command line's"),
    row("--override-opt_param-scheduler", &A::override_opt_param_scheduler,
        "On resume, continue with the command line's learning-rate schedule and weight decay although the "
        "checkpoint's differ (by default a difference stops the run)"),
    row("--dist-ckpt-strictness", &A::dist_ckpt_strictness,
        "Missing / unexpected checkpoint keys on load: assume_ok_unexpected, log_unexpected, log_all, "
        "raise_unexpected, raise_all, ignore_all"),
    row("--exit-signal-handler", &A::exit_signal_handler, "On SIGTERM: finish the iteration, save, exit 0"),
    row("--exit-duration-in-mins", &A::exit_duration_in_mins, "Save and exit after this many minutes")
        .shown(kNoneIfZero),
    row("--exit-interval", &A::exit_interval, "Save and exit when the iteration is a multiple of this")
        .shown(kNoneIfZero),
    row("--keep-latest-checkpoints", &A::keep_latest_checkpoints,
        "Delete all but the newest K committed checkpoints (not a Megatron flag)")
        .megatron(kOwn),
    row("--allow-other-run-checkpoints", &A::allow_other_run_checkpoints,
        "Let a run that loaded nothing from --save DIR save there although DIR holds checkpoints (of "
        "another run; they may be replaced or pruned) (not a Megatron flag)")
        .megatron(kOwn),
    row("--load-fallback-to-previous", &A::load_fallback_to_previous,
        "If the checkpoint to load is damaged, load the newest older one (not a Megatron flag)")
        .megatron(kOwn),
    row("--timing-log-level", &A::timing_log_level,
        "0: none; 1: per-phase times after each log line, (min, max) over ranks (forward-backward, "
        "all-grads-sync, optimizer); 2: also forward-compute, backward-compute, batch-generator, "
        "pipeline-send-recv, tp-comm, params-all-gather (device time from CUDA events on the GPU)"),
    row("--metrics-file", &A::metrics_file,
        "One JSON object per log line and evaluation (JSON Lines; truncated when the run starts at "
        "iteration 0, appended to when it resumes; not a Megatron flag)")
        .shown(kNoneIfEmpty)
        .megatron(kOwn),
    row("--sample-interval", &A::sample_interval,
        "Every N iterations the logging rank prints a sample continuation of --sample-prompt with the current "
        "weights (0: never; not a Megatron flag)")
        .shown(kNoneIfZero)
        .megatron(kOwn),
    row("--sample-prompt", &A::sample_prompt,
        "The prompt of --sample-interval's samples: text with a text tokenizer, token ids otherwise (default: the "
        "end-of-document token; not a Megatron flag)")
        .shown(kNoneIfEmpty)
        .megatron(kOwn),
    row("--tensorboard-dir", &A::tensorboard_dir,
        "Write TensorBoard event files here (the logging rank; Megatron's tags)")
        .shown(kNoneIfEmpty),
    row("--tensorboard-log-interval", &A::tensorboard_log_interval, "Iterations between TensorBoard scalars"),
    row("--tensorboard-queue-size", &A::tensorboard_queue_size,
        "Accepted (> 0): events are written to the file as they come and flushed at each log line, "
        "so there is no queue to size")
        .megatron(kImplementation),
    row("--log-timers-to-tensorboard", &A::log_timers_to_tensorboard,
        "iteration-time, throughput (with --log-throughput) and the phase timers at each log line"),
    row("--log-memory-to-tensorboard", &A::log_memory_to_tensorboard,
        "mem-reserved-bytes, mem-allocated-bytes, mem-allocated-count"),
    row("--log-validation-ppl-to-tensorboard", &A::log_validation_ppl_to_tensorboard, "Validation perplexity too"),
    row("--log-world-size-to-tensorboard", &A::log_world_size_to_tensorboard, "world-size"),
    row("--log-batch-size-to-tensorboard", &A::log_batch_size_to_tensorboard, "batch-size"),
    row("--no-log-learnig-rate-to-tensorboard", &A::no_log_learning_rate_to_tensorboard,
        "No learning-rate scalars (Megatron's spelling)")
        .negated("log_learning_rate_to_tensorboard"),
    row("--no-log-loss-scale-to-tensorboard", &A::no_log_loss_scale_to_tensorboard, "No loss-scale scalars")
        .negated("log_loss_scale_to_tensorboard"),
};

// The agreement text of a raw field (train/flag_table.h): kept as it was when checkpoints started
// saving it, so that older checkpoints compare equal.
std::string canonical_text(int64_t value) { return absl::StrCat(value); }
std::string canonical_text(double value) { return absl::StrFormat("%.17g", value); }
std::string canonical_text(bool value) { return value ? "true" : "false"; }
std::string canonical_text(const std::string& value) { return absl::StrCat("'", value, "'"); }
std::string canonical_text(const std::vector<std::string>& values) {
  std::vector<std::string> quoted;
  for (const std::string& v : values) quoted.push_back(canonical_text(v));
  return absl::StrJoin(quoted, " ");
}

// The rule's value of a raw field (a rule that does not apply to the field's type is refused at
// compile time, below).
PyValue python_value(PyRule rule, int64_t value) {
  if (rule == kNoneIfZero) return none_if_zero(value);
  if (rule == kNoneIfNegative && value < 0) return PyValue();
  return value;
}
PyValue python_value(PyRule rule, double value) {
  if (rule == kNoneIfNegative && value < 0) return PyValue();
  if (rule == kIntIfIntegral && value == std::floor(value) && std::abs(value) < 1e15) {
    return static_cast<int64_t>(value);
  }
  return value;
}
PyValue python_value(PyRule rule, bool value) {
  if (rule == kNegated) return !value;
  if (rule == kTrueOrNone && !value) return PyValue();
  return value;
}
PyValue python_value(PyRule rule, const std::string& value) {
  if (rule == kNoneIfEmpty && value.empty()) return PyValue();
  return value;
}
PyValue python_value(PyRule rule, const std::vector<std::string>& value) {
  if (rule == kNoneIfEmpty && value.empty()) return PyValue();
  return value;
}

// Compile-time checks of the rows: each flag and each field once, each rule on a field of its
// type, a reason for every refusal. (That every Arguments field has a row is a unit test:
// tests/unit/train/flag_table_test.cc.)
constexpr bool rule_fits(const FlagRow& r) {
  const size_t type = r.field.index();  // int64, double, bool, string, list (ArgumentField's order)
  switch (r.python) {
    case kValue: return true;
    case kNoneIfZero: return type == 0;
    case kNoneIfEmpty: return type == 3 || type == 4;
    case kNoneIfNegative: return type == 0 || type == 1;
    case kNegated:
    case kTrueOrNone: return type == 2;
    case kIntIfIntegral: return type == 1;
    case kCustom: return r.custom != nullptr;
  }
  return false;
}

constexpr bool rows_are_consistent() {
  for (size_t i = 0; i < std::size(kRows); ++i) {
    const FlagRow& r = kRows[i];
    if (!r.flag.starts_with("--") || !rule_fits(r)) return false;
    if ((r.nargs != Nargs::kOne) != (r.field.index() == 4)) return false;
    if ((r.megatron_status == kRefused || r.megatron_status == kRefusedAtValues) && r.megatron_note.empty()) {
      return false;
    }
    for (size_t j = 0; j < i; ++j) {
      if (kRows[j].flag == r.flag || kRows[j].field == r.field) return false;
    }
  }
  return true;
}
// Each entry of kAgreementOrder names a row, once.
constexpr bool agreement_order_names_rows() {
  for (size_t i = 0; i < std::size(kAgreementOrder); ++i) {
    bool found = false;
    for (const FlagRow& r : kRows) found = found || r.flag == kAgreementOrder[i];
    if (!found) return false;
    for (size_t j = 0; j < i; ++j) {
      if (kAgreementOrder[j] == kAgreementOrder[i]) return false;
    }
  }
  return true;
}
static_assert(agreement_order_names_rows(), "train/flag_table.cc: kAgreementOrder names a flag twice or one without a row");
static_assert(rows_are_consistent(),
              "train/flag_table.cc: a flag or field twice, a rule on a field of another type, "
              "a list without its Nargs, or a refusal without a reason");

}  // namespace

std::span<const FlagRow> flag_rows() { return kRows; }

const FlagRow* find_flag_row(std::string_view flag) {
  for (const FlagRow& r : kRows) {
    if (r.flag == flag) return &r;
  }
  return nullptr;
}

std::string flag_dest(const FlagRow& r) {
  if (!r.dest_name.empty()) return std::string(r.dest_name);
  std::string name(r.flag.substr(2));
  std::replace(name.begin(), name.end(), '-', '_');
  return name;
}

PyValue flag_python_value(const FlagRow& r, const Arguments& a) {
  if (r.python == kCustom) return r.custom(a);
  return std::visit([&](auto member) { return python_value(r.python, a.*member); }, r.field);
}

std::string flag_canonical_text(const FlagRow& r, const Arguments& a) {
  return std::visit([&](auto member) { return canonical_text(a.*member); }, r.field);
}

std::vector<const FlagRow*> flag_rows_in_agreement_order() {
  std::vector<const FlagRow*> ordered;
  std::set<const FlagRow*> listed;
  for (std::string_view flag : kAgreementOrder) {
    const FlagRow* r = find_flag_row(flag);
    if (r != nullptr && listed.insert(r).second) ordered.push_back(r);
  }
  for (const FlagRow& r : kRows) {
    if (listed.count(&r) == 0) ordered.push_back(&r);
  }
  return ordered;
}

void declare_flags(CLI::App& app, Arguments& a) {
  // A repeated flag takes its last value, as argparse's store action does (a launch script that
  // appends an override to a base command line), instead of CLI11's "given twice" error.
  app.option_defaults()->always_capture_default()->multi_option_policy(CLI::MultiOptionPolicy::TakeLast);
  for (const FlagRow& r : kRows) {
    std::visit(
        [&](auto member) {
          auto& field = a.*member;
          if constexpr (std::is_same_v<std::remove_reference_t<decltype(field)>, bool>) {
            app.add_flag(std::string(r.flag), field, std::string(r.help));
          } else {
            CLI::Option* option = app.add_option(std::string(r.flag), field, std::string(r.help));
            if (r.nargs == Nargs::kThree) option->expected(3);
            // Each occurrence replaces the list (argparse's nargs='*' keeps the last occurrence's values).
            if (r.nargs == Nargs::kOneOrMore) option->expected(1, -1)->trigger_on_parse();
          }
        },
        r.field);
  }
  // Decimal only, no silent clamp, no inf or nan (train/numeric_flags.h); ranges are checked in
  // validate_arguments, where the message can say what the flag means.
  make_numeric_options_strict(app);
}

std::string megatron_flag_table() {
  std::string out;
  auto line = [&](std::string_view flag, FlagStatus status, std::string_view note, bool declared) {
    out += JsonObject()
               .add("flag", flag)
               .add("status", flag_status_name(status))
               .add("declared", declared)
               .add("note", note)
               .str() +
           "\n";
  };
  for (const FlagRow& r : kRows)
    line(r.flag, r.megatron_status, r.megatron_note.empty() ? r.help : r.megatron_note, true);
  for (const RefusedMegatronFlag& refused : undeclared_refused_megatron_flags()) {
    line(refused.flag, kRefused, refused.reason, false);
  }
  return out;
}

}  // namespace gpt
