// The flag table's rows for Megatron's data, logging and checkpoint argument groups, in --help's order
// (train/args/flag_table.h says what a row holds; train/args/flag_rows.h joins the groups).
#include "train/args/flag_rows.h"

namespace gpt {
namespace {

using A = Arguments;
using enum FlagStatus;
using enum PyRule;

// --device's values (not a Megatron flag): auto, the GPU when one is built and visible.
constexpr std::string_view kDevices[] = {"auto", "cpu", "cuda"};

// --async-strategy's values: both the background writer thread of --async-save here.
constexpr std::string_view kAsyncStrategies[] = {"nvrx", "mcore"};

// --logging-level in the argument dump: as given (0 is Python's NOTSET), else None.
PyValue logging_level_value(const Arguments& a) {
  return flag_given(a, &A::logging_level) ? PyValue(a.logging_level) : PyValue();
}

constexpr FlagRow kRows[] = {
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
    row("--device", &A::device, "auto, cpu or cuda (not a Megatron flag)").one_of(kDevices).megatron(kOwn),
    // Evaluation and logging.
    row("--eval-interval", &A::eval_interval, "Iterations between evaluations on the validation split").positive(),
    row("--eval-iters", &A::eval_iters, "Global batches per evaluation (0: no evaluation)").non_negative(),
    row("--log-interval", &A::log_interval, "Iterations between log lines").positive(),
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
        "iteration: not reproduced, exit 17 (resume from the last checkpoint); reproduced, report the samples, save "
        "and exit 16 for a rerun "
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
        "With --log-straggler: also list this many ranks with the lowest and the highest throughput")
        .positive(),
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
        .one_of(kAsyncStrategies)
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
        "pipeline-send-recv, tp-comm, params-all-gather (device time from CUDA events on the GPU)")
        .in_range(0, 2),
    row("--logging-level", &A::logging_level,
        "Python's logging level (DEBUG 10, INFO 20, WARNING 30, ERROR 40; else MEGATRON_LOGGING_LEVEL, as "
        "Megatron): above 20 the start-up notes are not printed, above 30 the warnings neither; errors, the "
        "argument dump and the iteration lines (Megatron's print()s) always are")
        .shown(logging_level_value)
        .megatron(kImplementation,
                  "Python's levels (else MEGATRON_LOGGING_LEVEL): above 20 the start-up notes (INFO) are not "
                  "printed, above 30 the warnings (WARNING) neither; errors, the argument dump and the iteration "
                  "lines (Megatron's print()s) always are"),
    row("--metrics-file", &A::metrics_file,
        "One JSON object per log line and evaluation (JSON Lines; truncated when the run starts at "
        "iteration 0, appended to when it resumes; not a Megatron flag)")
        .shown(kNoneIfEmpty)
        .megatron(kOwn),
    row("--sample-interval", &A::sample_interval,
        "Every N iterations the logging rank prints a sample continuation of --sample-prompt with the current "
        "weights (0: never; not a Megatron flag)")
        .non_negative()
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
    row("--tensorboard-log-interval", &A::tensorboard_log_interval, "Iterations between TensorBoard scalars")
        .positive(),
    row("--tensorboard-queue-size", &A::tensorboard_queue_size,
        "Accepted (> 0): events are written to the file as they come and flushed at each log line, "
        "so there is no queue to size")
        .positive()
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
static_assert(rows_are_consistent(kRows),
              "train/args/flag_rows_data.cc: a flag or field twice, a rule on a field of another type, "
              "a list without its Nargs, or a refusal without a reason");

}  // namespace

std::span<const FlagRow> data_flag_rows() { return kRows; }

}  // namespace gpt
