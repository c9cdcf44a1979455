// pretrain_gpt's command line, with Megatron-LM's flag names, meanings and defaults
// (megatron/training/arguments.py). Parsing and validation happen before anything is allocated;
// every problem is an absl::Status whose message names the flag.
// Each field but `given` and `notes` is one flag's, declared once in a flag table row (train/flag_rows_*.cc:
// name, help, Megatron dest and status, constraint); a field without a row fails flag_table_test.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/status.h"
#include "optim/lr_schedule.h"
#include "parallel/pipeline/schedule.h"

namespace gpt {

struct Arguments {
  // Model.
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t ffn_hidden_size = 0;          // 0: 4 * hidden_size
  int64_t num_attention_heads = 0;
  int64_t kv_channels = 0;              // 0: hidden_size / num_attention_heads
  int64_t seq_length = 0;
  int64_t max_position_embeddings = 0;
  int64_t make_vocab_size_divisible_by = 128;
  bool untie_embeddings_and_output_weights = false;
  double init_method_std = 0.02;
  double norm_epsilon = 1e-5;
  double hidden_dropout = 0.1;          // Megatron's default; masks independent of the layout
  double attention_dropout = 0.1;
  // Llama-style blocks (train/args/model_arguments.cc validates them).
  std::string position_embedding_type = "learned_absolute";  // learned_absolute, rope or none
  bool no_position_embedding = false;   // Megatron's older spelling of "no learned position embedding"
  double rotary_percent = 1.0;          // rope: fraction of each head's dims rotated
  double rotary_base = 10000;           // rope: the frequency base
  bool rotary_interleaved = false;      // rope: pairs (2j, 2j + 1) instead of (j, j + rotary_dim / 2)
  bool use_rope_scaling = false;        // rope: Llama 3.1's frequency scaling (kernels/rope_frequencies.h)
  double rope_scaling_factor = 8.0;     // ... its factor (Megatron's default 8)
  std::string normalization = "LayerNorm";  // LayerNorm or RMSNorm
  bool swiglu = false;                  // gated SiLU MLP (fc1 twice as wide)
  bool group_query_attention = false;
  int64_t num_query_groups = 1;         // with --group-query-attention (Megatron's default 1)
  bool disable_bias_linear = false;     // no biases in the four linear layers
  bool add_qkv_bias = false;            // linear_qkv's bias even with --disable-bias-linear (Qwen2)
  bool apply_layernorm_1p = false;      // norms scale by 1 + weight, the weight zero-centred
  bool squared_relu = false;            // MLP activation relu(x)^2 (not with --swiglu)
  bool qk_layernorm = false;            // each query and key head normalized before RoPE

  // Parallelism.
  int64_t tensor_model_parallel_size = 1;
  int64_t pipeline_model_parallel_size = 1;
  int64_t num_layers_per_virtual_pipeline_stage = 0;  // 0: no interleaving
  int64_t num_virtual_stages_per_pipeline_rank = 0;   // Megatron's newer spelling of the same; 0: unset
  // Megatron's uneven split (train/pipeline_split.h): the first / last pipeline rank's layers (0: unset,
  // the even split), the embedding / the loss counted as one layer of the first / last virtual stage.
  int64_t decoder_first_pipeline_num_layers = 0;
  int64_t decoder_last_pipeline_num_layers = 0;
  bool account_for_embedding_in_pipeline_split = false;
  bool account_for_loss_in_pipeline_split = false;
  // This program's: 1f1b, interleaved, zb-h1, zb-v or auto (the launcher replaces auto with its
  // choice, train/schedule_choice.h); empty: what Megatron's flags imply (interleaved with model
  // chunks, else 1f1b).
  std::string pipeline_schedule;
  std::string pipeline_schedule_costs;  // auto's measured costs: a metrics file with a pipeline timeline
  // The interleaved schedule's microbatch group n (Megatron's microbatch_group_size_per_vp_stage):
  // each chunk runs n microbatches in a row; 0: unset, p (Megatron's default).
  int64_t microbatch_group_size_per_vp_stage = 0;
  // Megatron's overlap of the interleaved schedule's warm-up and flush transfers with compute: the
  // same compute order and numbers here (train/args/pipeline_arguments.h).
  bool overlap_p2p_comm_warmup_flush = false;
  bool sequence_parallel = false;
  // Context parallelism: each sequence split over this many ranks (Megatron's rank order puts them
  // between TP and DP); how each layer's attention crosses them: p2p (ring) or a2a, one value for
  // every layer or one per layer.
  int64_t context_parallel_size = 1;
  std::vector<std::string> cp_comm_type = {"p2p"};
  // --cp-comm-type a2a+p2p's two levels [A, P] of the context group (A x P = CP; Megatron's
  // --hierarchical-context-parallel-sizes, nargs '+' of int; "2 2", "[2 2]" and "2,2" all read as
  // [2, 2]: context_parallel_arguments.h parses them). Empty: no levels.
  std::vector<std::string> hierarchical_context_parallel_sizes;
  // Megatron's other rank order, "tp-cp-ep-pp-dp" (parallel/process_grid.h): the pipeline stages of
  // one replica on neighbouring ranks instead of its data-parallel replicas.
  bool use_tp_pp_dp_mapping = false;
  // Megatron's size of the expert layers' tensor-parallel groups (0: --tensor-model-parallel-size).
  // This program's models have no expert layers, so as in Megatron for a dense model no parameter
  // uses those groups: the value is only checked as Megatron's parallel_state checks it.
  int64_t expert_tensor_parallel_size = 0;
  // Megatron's expert-parallel size: 1 (its default) is accepted; expert parallelism is not built
  // yet, so a larger value is refused (train/args/moe_arguments.cc).
  int64_t expert_model_parallel_size = 1;
  // Mixture of experts (Megatron's moe argument group; train/args/moe_arguments.h validates them,
  // model/moe_config.h holds what the model reads). 0 / empty: not given (Megatron's None).
  int64_t num_experts = 0;                      // 0: a dense model
  int64_t moe_ffn_hidden_size = 0;              // each expert's MLP width; 0: --ffn-hidden-size
  std::string moe_layer_freq = "1";             // an int N (every N-th layer) or a list expression
  int64_t moe_shared_expert_intermediate_size = 0;
  bool moe_shared_expert_overlap = false;       // a schedule choice: the same numbers
  int64_t moe_router_topk = 2;
  std::string moe_router_score_function = "softmax";  // softmax or sigmoid
  bool moe_router_pre_softmax = false;
  double moe_router_topk_scaling_factor = 0;    // 0: none (Megatron's None)
  std::string moe_router_dtype;                 // "": none; fp32 or fp64
  int64_t moe_router_num_groups = 0;            // device-limited routing: 0 none
  int64_t moe_router_group_topk = 0;
  bool moe_router_enable_expert_bias = false;   // aux-loss-free balancing
  double moe_router_bias_update_rate = 1e-3;
  std::vector<std::string> moe_router_load_balancing_type = {"aux_loss"};
  std::vector<std::string> moe_aux_loss_coeff = {"0.0"};  // one per load-balancing type
  double moe_z_loss_coeff = 0;                  // 0: none
  double moe_expert_capacity_factor = -1;       // negative: none (dropless)
  std::string moe_token_drop_policy = "probs";  // probs or position
  bool moe_pad_expert_input_to_capacity = false;
  bool moe_grouped_gemm = false;                // kernel choices: the same numbers
  bool moe_permute_fusion = false;
  bool moe_router_fusion = false;
  std::string moe_token_dispatcher_type = "allgather";  // allgather or alltoall (flex refused)
  bool moe_per_layer_logging = false;
  bool use_distributed_optimizer = false;
  bool overlap_grad_reduce = false;
  bool overlap_param_gather = false;
  int64_t ddp_bucket_size = 0;          // elements; 0: Megatron's default (with --overlap-grad-reduce)
  // Megatron's partial distributed optimizer: the data x context group split into this many
  // instances of consecutive ranks, the optimizer state sharded within each (parallel/process_grid.h).
  int64_t num_distributed_optimizer_instances = 1;
  // Megatron-FSDP (train/args/sharding_arguments.h): the ZeRO level from the strategy, the elements per
  // communication unit (0: one unit per layer / embedding / output layer), two fixed unit buffers.
  bool use_megatron_fsdp = false;
  bool use_torch_fsdp2 = false;
  // Megatron-FSDP's precision of the main parameters, main gradients and gradient communication;
  // accepted where they resolve to FP32, this program's (train/args/sharding_arguments.h).
  std::string megatron_fsdp_main_params_dtype = "fp32";
  std::string megatron_fsdp_main_grads_dtype = "auto";
  std::string megatron_fsdp_grad_comm_dtype = "auto";  // ZeRO-3 as Megatron's PyTorch FSDP2 wrapper shards (train/args/sharding_arguments.h)
  std::string data_parallel_sharding_strategy = "optim_grads_params";
  int64_t suggested_communication_unit_size = 0;
  bool fsdp_double_buffer = false;
  // Optimizer state of the first --optimizer-offload-fraction of the owned elements in host memory,
  // its step on the host (optim/adamw.h); Megatron requires --use-precision-aware-optimizer with it.
  bool optimizer_cpu_offload = false;
  double optimizer_offload_fraction = 1.0;
  bool use_precision_aware_optimizer = false;
  bool overlap_cpu_optimizer_d2h_h2d = false;  // pipeline the offloaded parts' copies and host steps
  std::string distributed_backend;      // "": NCCL on GPU, MPI on CPU; gloo becomes mpi (validate_arguments)
  double distributed_timeout_minutes = 10;  // fractions allowed (tests use seconds)

  // Training.
  int64_t micro_batch_size = 0;
  int64_t global_batch_size = 0;        // 0: micro_batch_size * data-parallel size
  int64_t train_iters = 0;              // with --train-samples: train_samples / global_batch_size (floor)
  // Sample-based training (Megatron's alternative to --train-iters; 0: not given): the schedule's
  // lengths are counted in samples as given instead of iterations x --global-batch-size.
  int64_t train_samples = 0;
  int64_t lr_decay_samples = 0;         // 0: train_samples
  int64_t lr_warmup_samples = 0;
  double lr = 0.0;
  double min_lr = 0.0;
  // The word embedding and output layer on their own peak and minimum learning rate, the same
  // schedule otherwise (Megatron's decoupled_lr / decoupled_min_lr); < 0: not given.
  double decoupled_lr = -1.0;
  double decoupled_min_lr = -1.0;
  std::string lr_decay_style = "linear";
  int64_t lr_decay_iters = 0;           // 0: train_iters
  int64_t lr_warmup_iters = 0;
  double lr_warmup_fraction = -1.0;     // < 0: not given
  double weight_decay = 0.01;
  bool apply_wd_to_qk_layernorm = false;  // --qk-layernorm's weights and biases take weight decay
  double clip_grad = 1.0;
  double adam_beta1 = 0.9;
  double adam_beta2 = 0.999;
  double adam_eps = 1e-8;
  bool bf16 = false;
  bool fp16 = false;
  // FP8 GEMMs in the transformer layers' linears (train/args/fp8_arguments.h; CPU backend only).
  std::string fp8_format;                          // "" (None), e4m3 or hybrid
  std::string fp8_recipe = "delayed";              // tensorwise or delayed (Megatron's default)
  int64_t fp8_margin = 0;
  int64_t fp8_amax_history_len = 1;
  std::string fp8_amax_compute_algo = "most_recent";
  bool no_fp8_wgrad = false;
  int64_t fp8_interval = 1;
  // Loss scaling (Megatron's grad scalers; docs/MIXED_PRECISION.md). --loss-scale: a constant scale
  // (with --fp16 or --bf16; < 0: not given, then --fp16 uses the dynamic scaler of the four below).
  double loss_scale = -1.0;
  double initial_loss_scale = 4294967296.0;  // 2^32
  double min_loss_scale = 1.0;
  int64_t loss_scale_window = 1000;
  int64_t hysteresis = 2;
  int64_t seed = 1234;
  // Bitwise reproducible kernels only (on the GPU: cuDNN attention's backward without atomics).
  bool deterministic_mode = false;
  // auto / fused: cuDNN's fused flash attention where it applies (BF16, head dim a multiple of 8 up
  // to 128), the exact reference kernel elsewhere (fused refuses such a model); local / unfused:
  // always the reference kernel. flash (the FlashAttention library) is refused.
  std::string attention_backend = "auto";  // flash: as auto (exact attention; the fused path where it applies)

  // Megatron implementation choices that have one meaning in this program (parse_arguments' help
  // says which; validate_arguments refuses the values that cannot be honoured). Kept so that a
  // Megatron launch script runs unchanged, and so that none of them is accepted and ignored.
  std::string transformer_impl = "transformer_engine";  // local or transformer_engine: this program's kernels
  bool use_mcore_models = false;
  bool no_gradient_accumulation_fusion = false;
  bool attention_softmax_in_fp32 = false;
  bool no_rope_fusion = false;
  bool manual_gc = false;
  int64_t manual_gc_interval = 0;
  bool no_create_attention_mask_in_dataloader = false;
  bool no_mmap_bin_files = false;
  bool use_flash_attn = false;
  bool no_masked_softmax_fusion = false;
  bool no_bias_gelu_fusion = false;
  bool no_bias_dropout_fusion = false;
  bool no_bias_swiglu_fusion = false;
  bool no_persist_layer_norm = false;
  bool no_async_tensor_model_parallel_allreduce = false;
  bool use_cpu_initialization = false;
  bool apply_query_key_layer_scaling = false;
  bool accumulate_allreduce_grads_in_fp32 = false;
  bool ddp_average_in_collective = false;  // the data-parallel mean either way (pre-scaled sum here)
  bool defer_embedding_wgrad_compute = false;  // the output layer's weight gradient: the same sum either way
  int64_t wgrad_deferral_limit = 0;            // with defer_embedding_wgrad_compute
  bool overlap_param_gather_with_optimizer_step = false;  // needs the distributed optimizer and --overlap-param-gather
  bool disable_gloo_process_groups = false;    // no Gloo groups exist here
  int64_t check_weight_hash_across_dp_replicas_interval = 0;  // 0: never (train/resilience/replica_check.h)
  bool test_mode = false;  // Megatron's real-time tests: the q/k norms equal on every rank (train/resilience/qk_layernorm_check.h)
  int64_t empty_unused_memory_level = 0;
  bool no_check_for_nan_in_loss_and_grad = false;  // refused: no check here stops a run
  bool calculate_per_token_loss = false;
  bool cross_entropy_loss_fusion = false;          // the cross entropy is one fused FP32 kernel either way
  std::string cross_entropy_fusion_impl = "native";  // native or te: this program's kernel either way
  int64_t num_workers = 2;                         // >= 0: batches are read by the training process itself
  // The global batch size growing with the consumed samples (train/batch_size_schedule.h):
  // START INCREMENT SAMPLES (Megatron's deprecated ramp-up), or "THRESHOLD:BATCH ..." in tokens.
  std::vector<std::string> rampup_batch_size;
  std::string step_batch_size_schedule;

  // Activation recompute (megatron/core/transformer/transformer_config.py): full re-runs whole
  // layers in backward from a stashed input, selective only the attention core.
  std::string recompute_granularity;    // "": none; full or selective
  std::string recompute_method;         // full: uniform (groups of N layers) or block (first N layers)
  int64_t recompute_num_layers = 0;     // full: N, per pipeline stage / virtual chunk; 0: not given
  bool recompute_activations = false;   // Megatron's shorthand for --recompute-granularity selective

  // Data.
  bool mock_data = false;
  int64_t vocab_size = 0;
  std::vector<std::string> data_path;   // a prefix, or weight prefix pairs
  std::string split = "969, 30, 1";  // Megatron's default, spelled as its (names the index cache)
  std::string vocab_file;
  std::string merge_file;
  std::string tokenizer_type;           // GPT2BPETokenizer (default with --vocab-file), NullTokenizer,
                                        // (GPT)SentencePieceTokenizer or HuggingFaceTokenizer
  std::string tokenizer_model;          // the SentencePiece model, or the tokenizer.json (or its directory)
  std::string data_cache_path;

  // Device (not a Megatron flag: Megatron always uses the GPU). auto: the GPU when the CUDA
  // backend is built and one is visible, else the CPU reference backend.
  std::string device = "auto";

  // Evaluation and logging.
  int64_t eval_interval = 1000;
  int64_t eval_iters = 100;
  int64_t log_interval = 100;
  bool log_throughput = false;  // TFLOP/s/GPU (and tokens/s/GPU) in the log line
  bool log_params_norm = false;        // "params norm" in the log line
  bool log_num_zeros_in_grad = false;  // "num zeros" in the log line
  int64_t timing_log_level = 0;  // >= 1: Megatron's "(min, max) time across ranks" lines per phase
  int64_t logging_level = 0;     // Python's level numbers; given or not: flag_given (train/args/logging_level.h)
  // Megatron's rerun state machine (train/resilience/rerun_check.h).
  std::string rerun_mode = "disabled";  // disabled, validate_results or report_stats
  bool check_for_spiky_loss = false;
  // Megatron's RerunErrorInjector (train/resilience/rerun_error_injector.h): 0 none, else one in this many
  // validation calls rejected, as correct_result, transient_error or persistent_error.
  int64_t error_injection_rate = 0;
  std::string error_injection_type = "transient_error";
  bool log_straggler = false;     // rank 0 names the slowest and fastest ranks (train/report/straggler_report.h)
  int64_t straggler_minmax_count = 1;  // > 1: also the N slowest and N fastest ranks by throughput
  std::string metrics_file;      // "": none; else JSON Lines per log line (train/report/metrics_file.h)
  // Samples during training (train/report/training_sample.h; not Megatron flags).
  int64_t sample_interval = 0;   // 0: none; else a sample continuation every N iterations
  std::string sample_prompt;     // "": the end-of-document token
  // TensorBoard (train/report/tensorboard_log.h).
  std::string tensorboard_dir;   // "": none
  int64_t tensorboard_log_interval = 1;
  int64_t tensorboard_queue_size = 1000;  // accepted: events are written directly, flushed per log line
  bool log_timers_to_tensorboard = false;
  bool log_memory_to_tensorboard = false;
  bool log_validation_ppl_to_tensorboard = false;
  bool log_world_size_to_tensorboard = false;
  bool log_batch_size_to_tensorboard = false;
  bool no_log_learning_rate_to_tensorboard = false;  // Megatron's --no-log-learnig-rate-to-tensorboard
  bool no_log_loss_scale_to_tensorboard = false;

  // Checkpoints (docs/CHECKPOINTS.md; validated in train/checkpointing.cc).
  std::string save;                     // directory; "": no checkpoints
  int64_t save_interval = 0;            // iterations between saves; 0: only at the end and on exit
  std::string load;                     // directory; "": start from scratch
  int64_t ckpt_step = -1;               // iteration to load instead of the tracker's; -1: the tracker's
  bool no_load_optim = false;
  bool no_load_rng = false;
  bool no_save_optim = false;
  bool finetune = false;                // parameters only; iteration and data start from 0
  // Megatron's torch_dist (its default), torch, torch_dcp and fsdp_dtensor ask for what this
  // program's one format gives (sharded, reshardable, async): accepted, the files are HDF5 either
  // way (a start-up note says so); hdf5 names it.
  std::string ckpt_format = "torch_dist";
  bool async_save = false;              // write from a host copy in a background thread
  bool use_persistent_ckpt_worker = false;  // accepted: the writer thread is one per save either way
  std::string dist_ckpt_strictness = "assume_ok_unexpected";
  bool exit_signal_handler = false;     // SIGTERM: finish the iteration, save, exit 0
  int64_t exit_duration_in_mins = 0;    // 0: none
  int64_t exit_interval = 0;            // 0: none
  int64_t keep_latest_checkpoints = 0;  // not Megatron's: delete older committed checkpoints; 0: keep all
  // not Megatron's: a fresh start may save into a directory holding checkpoints it did not load
  bool allow_other_run_checkpoints = false;
  bool load_fallback_to_previous = false;  // not Megatron's: a damaged newest checkpoint falls back
  // Megatron's distributed-checkpoint options (train/args/checkpoint_arguments.cc says what each means
  // here).
  bool dist_ckpt_optim_fully_reshardable = false;  // the optimizer state is always fully reshardable here
  bool ckpt_fully_parallel_load = false;           // every rank always reads only its own slices
  bool ckpt_fully_parallel_save = false;           // Megatron's deprecated spelling of the default
  bool no_ckpt_fully_parallel_save = false;        // replicated pieces written by data-parallel rank 0 only
  bool ckpt_assume_constant_structure = false;     // no save plan is cached here: the same files either way
  std::string async_strategy = "nvrx";             // nvrx or mcore: both the background writer thread here
  int64_t save_retain_interval = 0;                // 0: none; else older checkpoints not at multiples are deleted
  // The learning-rate schedule of a resumed run (Megatron's OptimizerParamScheduler.load_state_dict):
  // by default the checkpoint's and the command line's must agree.
  bool use_checkpoint_opt_param_scheduler = false;  // continue with the checkpoint's schedule
  bool verify_integrity = false;                   // checkpoints are always checksummed and verified here
  bool async_ckpt_use_cpu_shm = false;             // the host copy is this process's memory either way
  bool auto_detect_ckpt_format = false;            // --load always finds the format (HDF5) itself
  bool override_opt_param_scheduler = false;        // continue with the command line's schedule

  // The long names of the flags that appeared on the command line.
  std::set<std::string> given;
  // One-line notes on how an accepted Megatron flag is carried out here (--distributed-backend
  // gloo runs on MPI), printed once by rank 0 when training starts.
  std::vector<std::string> notes;
  bool was_given(const std::string& flag) const { return given.count(flag) > 0; }
};

// Parses argv (argv[0] is the program name). A request for --help returns a Cancelled status
// carrying the help text.
absl::StatusOr<Arguments> parse_arguments(int argc, const char* const* argv);
absl::StatusOr<Arguments> parse_arguments(const std::vector<std::string>& argv);

// The defaults that depend on other flags (the FFN and head sizes, the learning-rate schedule's
// length, the number of query groups, ZB-V's two model chunks, --no-position-embedding,
// --recompute-activations, GPT-2 BPE files' tokenizer type) and the notes on Megatron flags carried
// out otherwise, filled in one step. Safe on arguments not yet validated: a default whose inputs
// are invalid is left unset for validate_arguments to report.
void resolve_defaults(Arguments& args);
// Checks every constraint that does not need the world size: each row's declared constraint
// (train/args/flag_table.h) and the rules between flags. Changes nothing.
absl::Status validate_arguments(const Arguments& args);
// The part of validate_arguments that defines the model (its sizes, vocabulary padding, norms,
// positions, activations, attention groups), which validate_arguments runs too: what a checkpoint's
// saved arguments must pass (train/args/saved_arguments.h). Expects resolve_defaults first.
absl::Status validate_model_arguments(const Arguments& args);
// resolve_defaults, then validate_arguments: what the parser's callers (the launcher, the perf
// model, tests) do with parsed arguments.
absl::Status prepare_arguments(Arguments& args);
// The data flags: --mock-data or --data-path (one prefix or weight prefix pairs), the tokenizer.
absl::Status validate_data_arguments(const Arguments& args);
// The defaults that need the number of processes: --global-batch-size (micro batch x DP when not
// given) and, with --train-samples, --train-iters (Megatron's update_train_iters). A default whose
// inputs are invalid is left unset for validate_for_world to report.
void resolve_world_defaults(Arguments& args, int64_t world_size);
// The constraints that involve the number of processes (world = TP x PP x DP, batch divisibility).
// Changes nothing; expects resolve_world_defaults first.
absl::Status validate_for_world(const Arguments& args, int64_t world_size);
// resolve_world_defaults, then validate_for_world: what the launcher, the perf model and tests do.
absl::Status prepare_for_world(Arguments& args, int64_t world_size);

// The learning-rate schedule in samples: train/args/schedule_arguments.h.

// Megatron's padded vocabulary: the smallest multiple of --make-vocab-size-divisible-by x TP that is
// at least vocab_size, or an error naming the flags where it does not fit in int64.
absl::StatusOr<int64_t> checked_padded_vocab_size(const Arguments& args, int64_t vocab_size);

int64_t data_parallel_size(const Arguments& args, int64_t world_size);
// Model chunks per pipeline rank (v): from --num-layers-per-virtual-pipeline-stage or
// --num-virtual-stages-per-pipeline-rank, 1 without either. For validated arguments.
int virtual_pipeline_size(const Arguments& args);
// The pipeline schedule the trainer runs: --pipeline-schedule, or Megatron's for the layout. For
// validated arguments.
pipeline::ScheduleKind pipeline_schedule_kind(const Arguments& args);
// The largest number of microbatches per data-parallel rank of the run: --global-batch-size's (the
// evaluation's), or a ramp-up or step schedule's largest batch that divides. For validated arguments.
int64_t num_microbatches(const Arguments& args, int64_t world_size);

}  // namespace gpt
