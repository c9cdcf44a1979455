#include "train/flag_declarations.h"

#include "train/megatron_flags.h"
#include "train/metrics_file.h"
#include "train/numeric_flags.h"

namespace gpt {

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
               "Do not stop the run at a non-finite loss or gradient norm (Megatron's check, on by default): "
               "an iteration whose gradient norm is not finite skips its update on every rank (as Megatron's "
               "loss scaler does) and is counted in the log line as skipped, a non-finite loss as a nan iteration");
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
  app.add_flag("--allow-other-run-checkpoints", a.allow_other_run_checkpoints,
               "Let a run that loaded nothing from --save DIR save there although DIR holds checkpoints (of "
               "another run; they may be replaced or pruned) (not a Megatron flag)");
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

std::string megatron_flag_table(const CLI::App& app) {
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

}  // namespace gpt
