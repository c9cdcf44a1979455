#include "train/argument_table.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/ascii.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "data/megatron_description.h"

namespace gpt {

namespace {

// Python's repr of a float (data/megatron_description.h for finite values).
std::string python_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  return python_float_repr(value);
}

std::string python_repr_str(const std::string& text) {
  // Python quotes with ' unless the text holds a ' and no ".
  const bool double_quotes = text.find('\'') != std::string::npos && text.find('"') == std::string::npos;
  const char quote = double_quotes ? '"' : '\'';
  std::string out(1, quote);
  for (char c : text) {
    if (c == '\\' || c == quote) out += '\\';
    out += c;
  }
  return out + quote;
}

// Small builders for the table's None conventions.
PyValue none_if_empty(const std::string& text) { return text.empty() ? PyValue() : PyValue(text); }
PyValue none_if_zero(int64_t value) { return value == 0 ? PyValue() : PyValue(value); }
// A store_true flag whose Megatron default is None (it prints None, not False, when absent).
PyValue true_or_none(bool value) { return value ? PyValue(true) : PyValue(); }
// An int in Megatron held here as a double (fractions allowed): printed as the int when integral.
PyValue int_if_integral(double value) {
  return value == std::floor(value) && std::abs(value) < 1e15 ? PyValue(static_cast<int64_t>(value)) : PyValue(value);
}

// The ranks' agreement text of a raw value (and the checkpoints' saved arguments): every digit that
// matters (1e-3 and 0.001 agree, 1e-3 and 1.0000001e-3 do not), strings quoted. Kept as it was
// when checkpoints started saving it, so that older checkpoints compare equal.
std::string canonical_text(int64_t value) { return absl::StrCat(value); }
std::string canonical_text(double value) { return absl::StrFormat("%.17g", value); }
std::string canonical_text(bool value) { return value ? "true" : "false"; }
std::string canonical_text(const std::string& value) { return absl::StrCat("'", value, "'"); }
std::string canonical_text(const std::vector<std::string>& values) {
  std::vector<std::string> quoted;
  for (const std::string& v : values) quoted.push_back(canonical_text(v));
  return absl::StrJoin(quoted, " ");
}

// add(flag, raw[, python value[, dest]]): the raw field gives the canonical text, the python value
// (default: the raw value) the dump; dest defaults to the flag's name with '_' for '-'.
struct TableBuilder {
  std::vector<ArgumentEntry>& table;
  template <typename Raw>
  void operator()(const char* flag, const Raw& raw, PyValue python, const char* dest = nullptr) {
    std::string name = dest != nullptr ? dest : std::string(flag + 2);
    if (dest == nullptr) std::replace(name.begin(), name.end(), '-', '_');
    table.push_back({flag, std::move(name), std::move(python), canonical_text(raw)});
  }
  template <typename Raw>
  void operator()(const char* flag, const Raw& raw) {
    (*this)(flag, raw, PyValue(raw));
  }
};

}  // namespace

std::string python_str(const PyValue& value) {
  struct Visitor {
    std::string operator()(std::monostate) const { return "None"; }
    std::string operator()(bool v) const { return v ? "True" : "False"; }
    std::string operator()(int64_t v) const { return absl::StrCat(v); }
    std::string operator()(double v) const { return python_float(v); }
    std::string operator()(const std::string& v) const { return v; }
    std::string operator()(const std::vector<std::string>& v) const {
      std::vector<std::string> quoted;
      for (const std::string& item : v) quoted.push_back(python_repr_str(item));
      return absl::StrCat("[", absl::StrJoin(quoted, ", "), "]");
    }
  };
  return std::visit(Visitor{}, value);
}

std::vector<ArgumentEntry> argument_table(const Arguments& a, int64_t world_size) {
  std::vector<ArgumentEntry> t;
  TableBuilder add{t};
  // Model.
  add("--num-layers", a.num_layers);
  add("--hidden-size", a.hidden_size);
  add("--ffn-hidden-size", a.ffn_hidden_size, none_if_zero(a.ffn_hidden_size));
  add("--num-attention-heads", a.num_attention_heads);
  add("--kv-channels", a.kv_channels, none_if_zero(a.kv_channels));
  add("--seq-length", a.seq_length);
  add("--max-position-embeddings", a.max_position_embeddings);
  add("--make-vocab-size-divisible-by", a.make_vocab_size_divisible_by);
  add("--untie-embeddings-and-output-weights", a.untie_embeddings_and_output_weights);
  add("--init-method-std", a.init_method_std);
  add("--norm-epsilon", a.norm_epsilon);
  add("--hidden-dropout", a.hidden_dropout);
  add("--attention-dropout", a.attention_dropout);
  add("--position-embedding-type", a.position_embedding_type);
  add("--normalization", a.normalization);
  add("--no-position-embedding", a.no_position_embedding, !a.no_position_embedding, "add_position_embedding");
  add("--rotary-percent", a.rotary_percent);
  add("--rotary-base", a.rotary_base, int_if_integral(a.rotary_base));
  add("--swiglu", a.swiglu);
  add("--group-query-attention", a.group_query_attention);
  add("--num-query-groups", a.num_query_groups);
  add("--disable-bias-linear", a.disable_bias_linear, !a.disable_bias_linear, "add_bias_linear");
  // Parallelism.
  add("--tensor-model-parallel-size", a.tensor_model_parallel_size);
  add("--pipeline-model-parallel-size", a.pipeline_model_parallel_size);
  add("--num-layers-per-virtual-pipeline-stage", a.num_layers_per_virtual_pipeline_stage,
      none_if_zero(a.num_layers_per_virtual_pipeline_stage));
  add("--num-virtual-stages-per-pipeline-rank", a.num_virtual_stages_per_pipeline_rank,
      none_if_zero(a.num_virtual_stages_per_pipeline_rank));
  add("--sequence-parallel", a.sequence_parallel);
  add("--use-distributed-optimizer", a.use_distributed_optimizer);
  add("--overlap-grad-reduce", a.overlap_grad_reduce);
  add("--overlap-param-gather", a.overlap_param_gather);
  add("--ddp-bucket-size", a.ddp_bucket_size, none_if_zero(a.ddp_bucket_size));
  add("--distributed-backend", a.distributed_backend,
      none_if_empty(a.distributed_backend));  // None: NCCL on the GPU, MPI on the CPU
  add("--distributed-timeout-minutes", a.distributed_timeout_minutes, int_if_integral(a.distributed_timeout_minutes));
  // Batch, schedule, optimizer. Sample-based runs keep train_iters None in Megatron's namespace.
  add("--micro-batch-size", a.micro_batch_size);
  add("--global-batch-size", a.global_batch_size, none_if_zero(a.global_batch_size));
  add("--train-iters", a.train_iters,
      a.train_samples > 0 && !a.was_given("--train-iters") ? PyValue() : none_if_zero(a.train_iters));
  add("--train-samples", a.train_samples, none_if_zero(a.train_samples));
  add("--lr-decay-samples", a.lr_decay_samples, none_if_zero(a.lr_decay_samples));
  add("--lr-warmup-samples", a.lr_warmup_samples);
  add("--lr", a.lr);
  add("--min-lr", a.min_lr);
  add("--lr-decay-style", a.lr_decay_style);
  // Megatron leaves it None and decays over train_iters in the scheduler; validation filled it here.
  add("--lr-decay-iters", a.lr_decay_iters,
      a.was_given("--lr-decay-iters") ? none_if_zero(a.lr_decay_iters) : PyValue());
  add("--lr-warmup-iters", a.lr_warmup_iters);
  add("--lr-warmup-fraction", a.lr_warmup_fraction,
      a.lr_warmup_fraction < 0 ? PyValue() : PyValue(a.lr_warmup_fraction));
  add("--weight-decay", a.weight_decay);
  add("--clip-grad", a.clip_grad);
  add("--adam-beta1", a.adam_beta1);
  add("--adam-beta2", a.adam_beta2);
  add("--adam-eps", a.adam_eps);
  add("--bf16", a.bf16);
  add("--fp16", a.fp16);
  add("--seed", a.seed);
  add("--deterministic-mode", a.deterministic_mode);
  add("--rampup-batch-size", a.rampup_batch_size,
      a.rampup_batch_size.empty() ? PyValue() : PyValue(a.rampup_batch_size));
  add("--calculate-per-token-loss", a.calculate_per_token_loss);
  // Implementation choices (their meaning here: --help and docs/MEGATRON_FLAGS.md). Megatron's
  // --attention-backend is an enum, printed with its class name.
  add("--attention-backend", a.attention_backend, absl::StrCat("AttnBackend.", a.attention_backend));
  add("--transformer-impl", a.transformer_impl);
  add("--use-mcore-models", a.use_mcore_models, a.use_mcore_models, "deprecated_use_mcore_models");
  add("--no-gradient-accumulation-fusion", a.no_gradient_accumulation_fusion, !a.no_gradient_accumulation_fusion,
      "gradient_accumulation_fusion");
  add("--attention-softmax-in-fp32", a.attention_softmax_in_fp32);
  add("--no-rope-fusion", a.no_rope_fusion, !a.no_rope_fusion, "apply_rope_fusion");
  add("--manual-gc", a.manual_gc);
  add("--manual-gc-interval", a.manual_gc_interval);
  add("--no-create-attention-mask-in-dataloader", a.no_create_attention_mask_in_dataloader,
      !a.no_create_attention_mask_in_dataloader, "create_attention_mask_in_dataloader");
  add("--no-mmap-bin-files", a.no_mmap_bin_files, !a.no_mmap_bin_files, "mmap_bin_files");
  add("--use-flash-attn", a.use_flash_attn);
  add("--no-masked-softmax-fusion", a.no_masked_softmax_fusion, !a.no_masked_softmax_fusion, "masked_softmax_fusion");
  add("--no-bias-gelu-fusion", a.no_bias_gelu_fusion, !a.no_bias_gelu_fusion, "bias_gelu_fusion");
  add("--no-bias-dropout-fusion", a.no_bias_dropout_fusion, !a.no_bias_dropout_fusion, "bias_dropout_fusion");
  add("--no-bias-swiglu-fusion", a.no_bias_swiglu_fusion, !a.no_bias_swiglu_fusion, "bias_swiglu_fusion");
  add("--no-persist-layer-norm", a.no_persist_layer_norm);
  add("--no-async-tensor-model-parallel-allreduce", a.no_async_tensor_model_parallel_allreduce,
      !a.no_async_tensor_model_parallel_allreduce, "async_tensor_model_parallel_allreduce");
  add("--use-cpu-initialization", a.use_cpu_initialization, true_or_none(a.use_cpu_initialization));
  add("--apply-query-key-layer-scaling", a.apply_query_key_layer_scaling);
  add("--accumulate-allreduce-grads-in-fp32", a.accumulate_allreduce_grads_in_fp32);
  add("--empty-unused-memory-level", a.empty_unused_memory_level);
  add("--no-check-for-nan-in-loss-and-grad", a.no_check_for_nan_in_loss_and_grad, !a.no_check_for_nan_in_loss_and_grad,
      "check_for_nan_in_loss_and_grad");
  // Recompute.
  add("--recompute-granularity", a.recompute_granularity, none_if_empty(a.recompute_granularity));
  add("--recompute-method", a.recompute_method, none_if_empty(a.recompute_method));
  add("--recompute-num-layers", a.recompute_num_layers, none_if_zero(a.recompute_num_layers));
  add("--recompute-activations", a.recompute_activations);
  // Data.
  add("--mock-data", a.mock_data);
  add("--vocab-size", a.vocab_size, none_if_zero(a.vocab_size));
  add("--data-path", a.data_path, a.data_path.empty() ? PyValue() : PyValue(a.data_path));
  add("--split", a.split);
  add("--vocab-file", a.vocab_file, none_if_empty(a.vocab_file));
  add("--merge-file", a.merge_file, none_if_empty(a.merge_file));
  add("--tokenizer-type", a.tokenizer_type, none_if_empty(a.tokenizer_type));
  add("--data-cache-path", a.data_cache_path, none_if_empty(a.data_cache_path));
  add("--device", a.device);
  // Evaluation and logging.
  add("--eval-interval", a.eval_interval);
  add("--eval-iters", a.eval_iters);
  add("--log-interval", a.log_interval);
  add("--log-throughput", a.log_throughput);
  add("--log-params-norm", a.log_params_norm);
  add("--log-num-zeros-in-grad", a.log_num_zeros_in_grad);
  add("--timing-log-level", a.timing_log_level);
  add("--metrics-file", a.metrics_file, none_if_empty(a.metrics_file));
  add("--tensorboard-dir", a.tensorboard_dir, none_if_empty(a.tensorboard_dir));
  add("--tensorboard-log-interval", a.tensorboard_log_interval);
  add("--tensorboard-queue-size", a.tensorboard_queue_size);
  add("--log-timers-to-tensorboard", a.log_timers_to_tensorboard);
  add("--log-memory-to-tensorboard", a.log_memory_to_tensorboard);
  add("--log-validation-ppl-to-tensorboard", a.log_validation_ppl_to_tensorboard);
  add("--log-world-size-to-tensorboard", a.log_world_size_to_tensorboard);
  add("--log-batch-size-to-tensorboard", a.log_batch_size_to_tensorboard);
  add("--no-log-learnig-rate-to-tensorboard", a.no_log_learning_rate_to_tensorboard,
      !a.no_log_learning_rate_to_tensorboard, "log_learning_rate_to_tensorboard");
  add("--no-log-loss-scale-to-tensorboard", a.no_log_loss_scale_to_tensorboard, !a.no_log_loss_scale_to_tensorboard,
      "log_loss_scale_to_tensorboard");
  // Checkpoints.
  add("--save", a.save, none_if_empty(a.save));
  add("--save-interval", a.save_interval, none_if_zero(a.save_interval));
  add("--load", a.load, none_if_empty(a.load));
  add("--ckpt-step", a.ckpt_step, a.ckpt_step < 0 ? PyValue() : PyValue(a.ckpt_step));
  add("--no-load-optim", a.no_load_optim, true_or_none(a.no_load_optim));
  add("--no-load-rng", a.no_load_rng, true_or_none(a.no_load_rng));
  add("--no-save-optim", a.no_save_optim, true_or_none(a.no_save_optim));
  add("--finetune", a.finetune);
  add("--ckpt-format", a.ckpt_format);
  add("--async-save", a.async_save, true_or_none(a.async_save));
  add("--use-persistent-ckpt-worker", a.use_persistent_ckpt_worker);
  add("--dist-ckpt-strictness", a.dist_ckpt_strictness);
  add("--exit-signal-handler", a.exit_signal_handler);
  add("--exit-duration-in-mins", a.exit_duration_in_mins, none_if_zero(a.exit_duration_in_mins));
  add("--exit-interval", a.exit_interval, none_if_zero(a.exit_interval));
  add("--keep-latest-checkpoints", a.keep_latest_checkpoints);
  add("--allow-other-run-checkpoints", a.allow_other_run_checkpoints);
  add("--load-fallback-to-previous", a.load_fallback_to_previous);
  if (world_size > 0) {
    // What Megatron's validate_args derives before it prints.
    const int v = virtual_pipeline_size(a);
    t.push_back({"", "rank", int64_t{0}, ""});
    t.push_back({"", "world_size", world_size, ""});
    t.push_back({"", "data_parallel_size", data_parallel_size(a, world_size), ""});
    t.push_back({"", "virtual_pipeline_model_parallel_size", v > 1 ? PyValue(int64_t{v}) : PyValue(), ""});
    t.push_back({"", "params_dtype", std::string(a.bf16 ? "torch.bfloat16" : "torch.float32"), ""});
  }
  return t;
}

std::string describe_arguments(const Arguments& args, int64_t world_size) {
  std::vector<std::string> lines;
  for (const ArgumentEntry& entry : argument_table(args, world_size)) {
    const size_t dots = entry.dest.size() < 48 ? 48 - entry.dest.size() : 0;
    lines.push_back(absl::StrCat("  ", entry.dest, " ", std::string(dots, '.'), " ", python_str(entry.value)));
  }
  // Megatron sorts the whole lines, lower-cased (so "_" sorts after letters, as in its logs).
  std::stable_sort(lines.begin(), lines.end(), [](const std::string& x, const std::string& y) {
    return absl::AsciiStrToLower(x) < absl::AsciiStrToLower(y);
  });
  return absl::StrCat("------------------------ arguments ------------------------\n", absl::StrJoin(lines, "\n"),
                      "\n-------------------- end of arguments ---------------------");
}

}  // namespace gpt
