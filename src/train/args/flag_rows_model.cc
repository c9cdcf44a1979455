// The flag table's rows for Megatron's model and parallelism argument groups, in --help's order
// (train/args/flag_table.h says what a row holds; train/args/flag_rows.h joins the groups).
#include "train/args/flag_rows.h"

#include "train/args/flag_enums.h"

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "train/args/context_parallel_arguments.h"

namespace gpt {
namespace {

using A = Arguments;
using enum FlagStatus;
using enum PyRule;

// Megatron's --hierarchical-context-parallel-sizes is a list of ints (nargs '+', type int): [2, 2].
PyValue hierarchical_sizes_value(const Arguments& a) {
  if (a.hierarchical_context_parallel_sizes.empty()) return PyValue();
  const absl::StatusOr<std::vector<int64_t>> sizes = hierarchical_context_parallel_sizes(a);
  if (!sizes.ok()) return a.hierarchical_context_parallel_sizes;  // as given (validation refuses it)
  return absl::StrCat("[", absl::StrJoin(*sizes, ", "), "]");
}

constexpr FlagRow kRows[] = {
    // Model.
    row("--num-layers", &A::num_layers, "Number of transformer layers").required().positive(),
    row("--hidden-size", &A::hidden_size, "Transformer hidden size").required().positive(),
    row("--ffn-hidden-size", &A::ffn_hidden_size, "MLP hidden size (default 4 * hidden size)")
        .positive_if_given()
        .shown(kNoneIfZero),
    row("--num-attention-heads", &A::num_attention_heads, "Number of attention heads").required().positive(),
    row("--kv-channels", &A::kv_channels, "Head dimension (default hidden size / heads)")
        .positive_if_given()
        .shown(kNoneIfZero),
    row("--seq-length", &A::seq_length, "Sequence length").required().positive(),
    row("--max-position-embeddings", &A::max_position_embeddings, "Learned position embeddings").required().positive(),
    row("--make-vocab-size-divisible-by", &A::make_vocab_size_divisible_by,
        "Pad the vocabulary to a multiple of this times TP")
        .positive(),
    row("--untie-embeddings-and-output-weights", &A::untie_embeddings_and_output_weights,
        "Separate output layer instead of the tied word embedding"),
    row("--init-method-std", &A::init_method_std, "Standard deviation of weight initialization").positive(),
    row("--norm-epsilon", &A::norm_epsilon, "LayerNorm epsilon").positive(),
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
    row("--use-rope-scaling", &A::use_rope_scaling,
        "Llama 3.1's RoPE frequency scaling (Megatron's fixed low_freq_factor 1, high_freq_factor 4 and original "
        "context 8192): frequencies of wavelengths above 8192 divided by --rope-scaling-factor, those below 2048 "
        "kept, those between interpolated"),
    row("--rope-scaling-factor", &A::rope_scaling_factor, "The factor of --use-rope-scaling").positive(),
    row("--normalization", &A::normalization, "LayerNorm or RMSNorm").one_of(flag_enum_names<Normalization>()),
    row("--swiglu", &A::swiglu, "SwiGLU MLP (default --ffn-hidden-size: int(8h/3 / 64) * 64, as Megatron)"),
    row("--group-query-attention", &A::group_query_attention, "Grouped-query attention"),
    row("--num-query-groups", &A::num_query_groups, "Key/value head groups with --group-query-attention"),
    row("--disable-bias-linear", &A::disable_bias_linear,
        "No biases in the QKV, projection and MLP linears (with a GeLU MLP: the exact erf GeLU, as Megatron, "
        "whose bias-GeLU fusion then turns off)")
        .negated("add_bias_linear"),
    row("--add-qkv-bias", &A::add_qkv_bias,
        "A bias in the QKV linear even with --disable-bias-linear (Qwen2's q/k/v biases; the checkpoint's "
        "decoder.layers.N.self_attention.linear_qkv.bias)"),
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
    row("--tensor-model-parallel-size", &A::tensor_model_parallel_size, "Tensor-parallel size").positive(),
    row("--pipeline-model-parallel-size", &A::pipeline_model_parallel_size, "Pipeline-parallel size").positive(),
    row("--num-layers-per-virtual-pipeline-stage", &A::num_layers_per_virtual_pipeline_stage,
        "Layers per virtual stage (interleaved 1F1B schedule)")
        .positive_if_given()
        .shown(kNoneIfZero),
    row("--num-virtual-stages-per-pipeline-rank", &A::num_virtual_stages_per_pipeline_rank,
        "Model chunks per pipeline rank (interleaved 1F1B schedule)")
        .positive_if_given()
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
        "Megatron's rules: between PP and the number of microbatches, which it need not divide, but the last group's "
        "remainder "
        "is 0 or at least PP. Without model chunks it groups nothing, as in Megatron; refused with --pipeline-schedule "
        "zb-h1, zb-v and auto")
        .positive_if_given()
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
        "Tensor-parallel size of the expert (MoE) layers (default --tensor-model-parallel-size), independent of "
        "the attention's (Megatron's parallel folding): checked as Megatron checks it (world divisible by it x "
        "--expert-model-parallel-size x --pipeline-model-parallel-size; without the pipeline-last rank order and "
        "with PP > 1, world / (it x EP x PP) equal to the data-parallel size); for a dense model no parameter "
        "uses it (a start-up note)")
        .shown(kNoneIfZero),
    row("--use-distributed-optimizer", &A::use_distributed_optimizer, "Shard optimizer state across DP (ZeRO-1)"),
    row("--overlap-grad-reduce", &A::overlap_grad_reduce, "Overlap gradient reduction with backward"),
    row("--overlap-param-gather", &A::overlap_param_gather,
        "Overlap parameter all-gather with forward (ZeRO-3: prefetch the next unit's gather while one computes)"),
    row("--ddp-bucket-size", &A::ddp_bucket_size,
        "Elements per gradient bucket with --overlap-grad-reduce (default max(4e7, 1e6 x DP))")
        .positive_if_given()
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
        .megatron(kRefusedAtValues,
                  "fp32, and auto in FP32 training; the optimizer here always keeps FP32 master "
                  "weights"),
    row("--megatron-fsdp-main-grads-dtype", &A::megatron_fsdp_main_grads_dtype,
        "With --use-megatron-fsdp: the dtype of the main gradients: fp32")
        .megatron(kRefusedAtValues,
                  "fp32, and auto in FP32 training; main gradients are always FP32 here, also "
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
        "nccl, gloo (Megatron's CPU backend: the Gloo communicator under torchrun; under mpirun or srun it runs "
        "on the MPI communicator) or mpi (mpirun and srun only)")
        .shown(kNoneIfEmpty)
        .megatron(kRefusedAtValues,
                  "nccl (needs a GPU) and gloo as in Megatron under torchrun; gloo under mpirun/srun runs on the MPI "
                  "communicator, said in one note at start-up; mpi is this program's own, refused under torchrun"),
    row("--distributed-timeout-minutes", &A::distributed_timeout_minutes, "Bound on every collective wait")
        .shown(kIntIfIntegral),
};
static_assert(rows_are_consistent(kRows),
              "train/args/flag_rows_model.cc: a flag or field twice, a rule on a field of another type, "
              "a list without its Nargs, or a refusal without a reason");

}  // namespace

std::span<const FlagRow> model_flag_rows() { return kRows; }

}  // namespace gpt
