// Trainer::run (train/trainer.h): the loop over iterations and what it reports, by concept: the
// reports opened before the first iteration, one timed iteration and its interval's statistics,
// the iteration's diagnostics and Megatron's log line with the files that follow it
// (train/report/), the evaluations, and the summaries after the last iteration.
#include "train/report/expert_load.h"
#include "train/trainer.h"

#include <cmath>
#include <cstdio>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/cuda_runtime.h"
#include "core/timer.h"
#include "kernels/op_profile.h"
#include "train/args/argument_table.h"
#include "train/args/batch_size_arguments.h"
#include "train/rank_agreement.h"
#include "train/report/flops.h"
#include "train/report/log_line.h"
#include "train/report/memory_report.h"
#include "train/report/metrics_file.h"
#include "train/report/straggler_report.h"
#include "train/report/tensorboard_log.h"

namespace gpt {
namespace {

// Megatron's "(min, max) time across ranks" lines.
std::string format_phase_report(const std::vector<PhaseTiming>& timings) {
  std::string out = "(min, max) time across ranks (ms):";
  char line[160];
  for (const PhaseTiming& t : timings) {
    std::string name = t.name + " ";
    name.resize(48, '.');
    std::snprintf(line, sizeof(line), "\n    %s: (%.2f, %.2f)", name.c_str(), t.min_ms, t.max_ms);
    out += line;
  }
  return out;
}

// Adds `step`'s values to `sums`, name by name (the same names in the same order every step).
void accumulate_named(std::vector<std::pair<std::string, double>>& sums,
                      const std::vector<std::pair<std::string, double>>& step) {
  if (sums.empty()) {
    sums = step;
    return;
  }
  for (size_t i = 0; i < step.size(); ++i) sums[i].second += step[i].second;
}

}  // namespace

// What one run() reports through, and the statistics of its current log interval.
struct Trainer::RunReports {
  bool logging = false;                         // this rank prints the log line
  std::unique_ptr<MetricsFile> metrics;         // --metrics-file, the logging rank's
  std::unique_ptr<TensorBoardLog> tensorboard;  // --tensorboard-dir, the logging rank's
  int64_t first_iteration = 0;                  // where this run started
  // Since the last log line: training steps only; evaluation is not counted.
  double interval_seconds = 0.0;
  double interval_loss = 0.0;
  std::vector<std::pair<std::string, double>> interval_moe_losses;  // sums, as interval_loss
  std::vector<std::pair<std::string, double>> interval_moe_layer_losses;  // the same per layer
  std::vector<std::pair<int64_t, std::vector<double>>> interval_moe_tokens;  // sums of the steps
  std::vector<std::pair<int64_t, std::vector<double>>> run_moe_tokens;       // the same over the run
  int64_t run_moe_iterations = 0;
  int64_t interval_steps = 0, interval_iterations = 0, skipped = 0, nan_iterations = 0;
  bool memory_reported = false;
  // Per-op device time (kernels/op_profile.h): GPT_OP_PROFILE=1 profiles every iteration after
  // the first (warm-up); GPT_OP_PROFILE_FROM=k profiles iterations k, k+1, ... only, so that the
  // log lines of the iterations before are unaffected by profiling.
  int64_t profile_from = 0;
  int64_t profiled_iterations = 0;
  double profiled_seconds = 0.0;
};

absl::Status Trainer::run(const std::function<absl::StatusOr<bool>()>& after_iteration) {
  RunReports reports;
  GPT_RETURN_IF_ERROR(open_reports(reports));
  while (iteration_ < args_.train_iters) {
    GPT_ASSIGN_OR_RETURN(const StepResult step, timed_step(reports));
    report_iteration(step, reports);
    if (valid_data_ && iteration_ % args_.eval_interval == 0) {
      evaluate_and_report(Split::kValid, /*final=*/false, reports);
    }
    if (after_iteration) {
      GPT_ASSIGN_OR_RETURN(const bool stop, after_iteration());
      if (stop) return absl::OkStatus();
    }
  }
  report_run_end(reports);
  if (valid_data_) evaluate_and_report(Split::kValid, /*final=*/true, reports);
  if (test_data_) evaluate_and_report(Split::kTest, /*final=*/true, reports);
  return absl::OkStatus();
}

absl::Status Trainer::open_reports(RunReports& r) {
  // Megatron checks each batch size when the run reaches it; here every one this run will reach,
  // from where it starts (a resumed run may have passed batches this layout cannot divide).
  GPT_RETURN_IF_ERROR(
      check_batch_sizes_reached(args_, data_parallel_size_, consumed_samples_, args_.train_iters - iteration_));
  if (grid_.world_rank() == 0) {
    const std::string batches = batches_.describe(args_.micro_batch_size * data_parallel_size_, args_.seq_length);
    std::printf("%s", batches.c_str());
    std::fflush(stdout);
  }
  r.logging = grid_.is_logging_rank();
  // --metrics-file (train/report/metrics_file.h), the logging rank's: truncated when the run starts
  // at iteration 0, appended to when it resumes; every rank leaves if it cannot be opened.
  if (!args_.metrics_file.empty()) {
    absl::Status opened = absl::OkStatus();
    if (r.logging) {
      absl::StatusOr<std::unique_ptr<MetricsFile>> file = MetricsFile::open(args_.metrics_file, iteration_ > 0);
      if (file.ok()) r.metrics = std::move(*file);
      opened = file.status();
    }
    GPT_RETURN_IF_ERROR(agree_on_setup(opened, "opening --metrics-file"));
  }
  // --tensorboard-dir (train/report/tensorboard_log.h): the logging rank's event file.
  if (!args_.tensorboard_dir.empty()) {
    absl::Status opened;
    if (r.logging) {
      absl::StatusOr<std::unique_ptr<TensorBoardLog>> log = TensorBoardLog::open(args_);
      if (log.ok()) r.tensorboard = std::move(*log);
      opened = log.status();
    }
    GPT_RETURN_IF_ERROR(agree_on_setup(opened, "opening --tensorboard-dir"));
  }
  if (grid_.world_rank() == 0) {
    std::printf("%s\n", describe_arguments(args_, grid_.world_size()).c_str());
    std::printf(" > number of parameters on (tensor, pipeline) model parallel rank (%d, %d): %lld\n",
                grid_.coordinates().tensor, grid_.coordinates().pipeline,
                static_cast<long long>(parameters_on_rank()));
    std::fflush(stdout);
  }
  const std::string memory = memory_report(ctx_, grid_, memory_, memory_scratch_, memory_gathered_);
  if (!memory.empty()) {
    std::printf("%s", memory.c_str());
    std::fflush(stdout);
  }
  r.first_iteration = iteration_;
  r.profile_from = op_profile::from_iteration();
  return absl::OkStatus();
}

absl::StatusOr<StepResult> Trainer::timed_step(RunReports& r) {
  if (r.profile_from > 0 && iteration_ + 1 == r.profile_from) op_profile::set_enabled(true);
  const bool profiled = op_profile::enabled();
  Stopwatch step_time;
  const StepResult step = train_step();
  ctx_.synchronize();
  if (step.exit_code != 0) return requested_exit(step.exit_code, step.exit_reason, step.exit_saves);
  if (!args_.no_check_for_nan_in_loss_and_grad) GPT_RETURN_IF_ERROR(check_finite(step));
  r.interval_seconds += step_time.elapsed_seconds();
  if (profiled && r.profile_from == 0 && iteration_ == r.first_iteration + 1) {
    op_profile::reset();
  } else if (profiled) {
    r.profiled_seconds += step_time.elapsed_seconds();
    ++r.profiled_iterations;
  }
  if (std::isfinite(step.loss)) {
    r.interval_loss += step.loss;
    accumulate_named(r.interval_moe_losses, step.moe_losses);
    accumulate_named(r.interval_moe_layer_losses, step.moe_layer_losses);
    for (auto* sums : {&r.interval_moe_tokens, &r.run_moe_tokens}) {
      if (sums->empty()) {
        *sums = step.moe_tokens_per_expert;
        continue;
      }
      for (size_t l = 0; l < step.moe_tokens_per_expert.size(); ++l) {
        const std::vector<double>& tokens = step.moe_tokens_per_expert[l].second;
        for (size_t e = 0; e < tokens.size(); ++e) (*sums)[l].second[e] += tokens[e];
      }
    }
    if (!step.moe_tokens_per_expert.empty()) ++r.run_moe_iterations;
    ++r.interval_iterations;
  } else {
    ++r.nan_iterations;
  }
  if (step.skipped) ++r.skipped;
  ++r.interval_steps;
  return step;
}

void Trainer::report_iteration(const StepResult& step, RunReports& r) {
  // Megatron's rule: every --log-interval iterations, and the first iteration of the run (to
  // show the start-up cost) without starting a new interval.
  const bool interval_end = iteration_ % args_.log_interval == 0 || iteration_ == args_.train_iters;
  const bool first_of_run = iteration_ == r.first_iteration + 1;
  const bool tensorboard_now = !args_.tensorboard_dir.empty() && iteration_ % args_.tensorboard_log_interval == 0;
  // Megatron's diagnostics, for the iterations that report them (collectives: every rank decides
  // alike from the arguments). The step leaves the gradients in place, so they are counted here,
  // off the step itself.
  const bool reported = interval_end || first_of_run || tensorboard_now;
  std::optional<double> params_norm;
  std::optional<int64_t> num_zeros_in_grad;
  if (args_.log_params_norm && reported) params_norm = this->params_norm();
  // After an overflow Megatron's step returns no count (None): the field is left out.
  if (args_.log_num_zeros_in_grad && reported && !step.overflow) num_zeros_in_grad = zero_gradients();
  const double learning_rate = learning_rate_at(schedule_, scheduler_position_->samples());
  // Megatron's MoE tracker writes its values at every iteration.
  if (r.tensorboard && std::isfinite(step.loss)) r.tensorboard->moe(iteration_, step.moe_losses, step.moe_layer_losses);
  if (r.tensorboard && tensorboard_now) {
    r.tensorboard->iteration({.iteration = iteration_,
                              .consumed_samples = consumed_samples_,
                              .learning_rate = learning_rate,
                              .batch_size = global_batch_size_,
                              .loss = step.loss,
                              .loss_scale = loss_scale(),
                              .world_size = grid_.world_size(),
                              .grad_norm = step.overflow ? std::nullopt : std::optional<double>(step.grad_norm),
                              .num_zeros_in_grad = num_zeros_in_grad,
                              .params_norm = params_norm,
                              .allocated_bytes = static_cast<int64_t>(arena_.used_bytes()),
                              .reserved_bytes = ctx_.device() == Device::kCuda
                                                    ? static_cast<int64_t>(cuda::device_memory_used_bytes())
                                                    : static_cast<int64_t>(arena_.reserved_bytes()),
                              .allocation_count = static_cast<int64_t>(arena_.allocations())});
  }
  if (!interval_end && !first_of_run) return;
  // Megatron's throughput counts the batch size of the iteration logged.
  const double flops_per_iteration = model_flops_per_iteration(config_, global_batch_size_);
  const double seconds_per_iteration = r.interval_seconds / static_cast<double>(r.interval_steps);
  IterationLog log;
  log.iteration = iteration_;
  log.train_iters = args_.train_iters;
  log.consumed_samples = consumed_samples_;
  log.elapsed_ms_per_iteration = seconds_per_iteration * 1000.0;
  log.tflops_per_gpu = flops_per_iteration / (seconds_per_iteration * 1e12 * grid_.world_size());
  log.learning_rate = learning_rate;
  log.global_batch_size = global_batch_size_;
  log.lm_loss = r.interval_iterations > 0 ? r.interval_loss / static_cast<double>(r.interval_iterations) : NAN;
  const double iterations = static_cast<double>(r.interval_iterations);
  for (const auto& [name, sum] : r.interval_moe_losses) {
    log.moe_losses.emplace_back(name, r.interval_iterations > 0 ? sum / iterations : NAN);
  }
  log.loss_scale = loss_scale();
  log.grad_norm = step.overflow ? std::nullopt : std::optional<double>(step.grad_norm);
  log.skipped_iterations = r.skipped;
  log.nan_iterations = r.nan_iterations;
  log.tokens_per_second_per_gpu =
      static_cast<double>(global_batch_size_ * args_.seq_length) / (seconds_per_iteration * grid_.world_size());
  log.num_zeros_in_grad = num_zeros_in_grad;
  log.params_norm = params_norm;
  log_interval(log, seconds_per_iteration, flops_per_iteration, interval_end, r);
}

void Trainer::log_interval(const IterationLog& log, double seconds_per_iteration, double flops_per_iteration,
                           bool interval_end, RunReports& r) {
  // Before the timers, which reset the phases at an interval's end.
  if (args_.log_straggler && interval_end) {
    report_stragglers(grid_, phases_.forward_backward * 1e3 / static_cast<double>(r.interval_steps),
                      flops_per_iteration / grid_.world_size(), static_cast<int>(args_.straggler_minmax_count));
  }
  if (rerun_ && interval_end) rerun_->report_stats();
  const std::vector<PhaseTiming> timers =
      timing_ ? phase_timings(r.interval_steps, /*reset=*/interval_end)  // collective
              : std::vector<PhaseTiming>{};
  if (!timing_ && interval_end) phases_ = {};
  std::optional<MeasuredTimeline> timeline;  // of this iteration, gathered over the pipeline group
  if (timeline_) timeline = timeline_->gather(ctx_, grid_.pipeline(), forward_backward_->timeline(), iteration_);
  if (r.logging) print_log_line(log, seconds_per_iteration, timers, timeline, r);
  if (interval_end) {
    r.interval_seconds = 0.0;
    r.interval_loss = 0.0;
    r.interval_moe_losses.clear();
    r.interval_moe_layer_losses.clear();
    r.interval_moe_tokens.clear();
    r.interval_steps = r.interval_iterations = r.skipped = r.nan_iterations = 0;
  }
}

void Trainer::print_log_line(const IterationLog& log, double seconds_per_iteration,
                             const std::vector<PhaseTiming>& timers, const std::optional<MeasuredTimeline>& timeline,
                             RunReports& r) {
  const std::string timestamp = current_timestamp();
  std::printf("%s\n", format_log_line(log, timestamp, {.throughput = args_.log_throughput}).c_str());
  if (!timers.empty()) std::printf("%s\n", format_phase_report(timers).c_str());
  if (r.tensorboard) r.tensorboard->log_line(iteration_, seconds_per_iteration, log.tflops_per_gpu, timers);
  if (r.metrics) {
    IterationMetrics m{.log = log, .timestamp = timestamp};
    m.tokens_per_second = static_cast<double>(global_batch_size_ * args_.seq_length) / seconds_per_iteration;
    m.world_size = grid_.world_size();
    m.tensor_parallel = grid_.shape().tensor;
    m.pipeline_parallel = grid_.shape().pipeline;
    m.data_parallel = grid_.shape().data;
    m.timers = timers;
    m.arena_bytes = static_cast<int64_t>(arena_.used_bytes());
    // The interval's means per iteration, as the log line's losses.
    const double iterations = static_cast<double>(r.interval_iterations);
    for (const auto& [name, sum] : r.interval_moe_layer_losses) {
      m.moe_layer_losses.emplace_back(name, r.interval_iterations > 0 ? sum / iterations : NAN);
    }
    for (const auto& [layer, sums] : r.interval_moe_tokens) {
      ExpertLoad load{.layer = layer};
      for (double sum : sums) load.tokens_per_expert.push_back(r.interval_iterations > 0 ? sum / iterations : NAN);
      if (config_.moe.expert_model_parallel > 1) {
        load.tokens_per_expert_parallel_rank =
            tokens_per_expert_parallel_rank(load.tokens_per_expert, config_.moe.expert_model_parallel);
      }
      m.expert_load.push_back(std::move(load));
    }
    if (ctx_.device() == Device::kCuda) m.device_memory_bytes = static_cast<int64_t>(cuda::device_memory_used_bytes());
    r.metrics->write(iteration_record(m));
    if (timeline) r.metrics->write(timeline_record(*timeline));
  }
  if (!r.memory_reported && ctx_.device() == Device::kCuda) {
    // Megatron's report after the first interval. Memory is allocated once at start-up (arenas,
    // workspaces), so this is also the peak.
    std::printf("[Rank %d] (after %lld iterations) memory (MB) | allocated: %.1f | max allocated: %.1f | "
                "reserved: %.1f | max reserved: %.1f\n",
                grid_.world_rank(), static_cast<long long>(iteration_), arena_.used_bytes() / 1048576.0,
                arena_.used_bytes() / 1048576.0, cuda::device_memory_used_bytes() / 1048576.0,
                cuda::device_memory_used_bytes() / 1048576.0);
    r.memory_reported = true;
  }
  std::fflush(stdout);
}

void Trainer::evaluate_and_report(Split split, bool final, RunReports& r) {
  const bool valid = split == Split::kValid;
  const double loss = evaluate(split, /*verbose=*/final);
  const std::string where = !final ? absl::StrCat("iteration ", iteration_)
                            : valid ? absl::StrCat("iteration ", iteration_, " on validation set")
                                    : absl::StrCat("iteration ", iteration_, " on test set");
  print_evaluation(where, loss);
  if (r.metrics) r.metrics->write(validation_record(valid ? "valid" : "test", iteration_, final, loss));
  // Megatron writes the test split's loss to the log only.
  if (r.tensorboard && valid) r.tensorboard->validation(iteration_, consumed_samples_, loss);
}

void Trainer::report_run_end(const RunReports& r) {
  const std::string gathers =
      r.logging ? data_parallel_->gather_summary(iteration_ - r.first_iteration) : std::string();
  if (!gathers.empty()) {
    std::printf("%s\n", gathers.c_str());
    std::fflush(stdout);
  }
  if (r.logging && config_.moe.expert_model_parallel > 1) {
    const std::string load =
        expert_parallel_load_line(r.run_moe_tokens, config_.moe.expert_model_parallel, r.run_moe_iterations);
    if (!load.empty()) {
      std::printf("%s\n", load.c_str());
      std::fflush(stdout);
    }
  }
  if (r.logging && r.profiled_iterations > 0) {
    std::printf("per-op time (rank %d, %lld iterations):\n%s", grid_.world_rank(),
                static_cast<long long>(r.profiled_iterations),
                op_profile::report(r.profiled_iterations,
                                   r.profiled_seconds * 1e3 / static_cast<double>(r.profiled_iterations))
                    .c_str());
    std::fflush(stdout);
  }
}

}  // namespace gpt
