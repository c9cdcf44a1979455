// The training loop: builds this rank's model chunks, optimizer and data sources from validated
// arguments, then runs iterations: the global batch's microbatches through the pipeline schedule
// (forward_backward.h; gradients accumulated), gradient reduction, clipping and an AdamW step,
// printing Megatron's log line every --log-interval iterations.
#pragma once

#include <array>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "core/arena.h"
#include "core/context.h"
#include "core/phase_timer.h"
#include "data/dataset_split.h"
#include "data/microbatch.h"
#include "data/sample_source.h"
#include "model/gpt_model.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "parallel/process_grid.h"
#include "train/args/arguments.h"
#include "train/batch_size_schedule.h"
#include "train/resilience/rerun_check.h"
#include "train/checkpoint_records.h"
#include "train/data_parallel/strategy.h"
#include "train/forward_backward.h"
#include "train/loss_scaling.h"
#include "train/memory_plan.h"
#include "train/report/memory_report.h"
#include "train/report/metrics_file.h"
#include "core/timer.h"
#include "train/microbatch_feed.h"
#include "train/model_stage.h"
#include "train/report/pipeline_timeline.h"
#include "train/scheduler_position.h"
#include "train/training_state.h"

namespace gpt {

struct StepResult {
  double loss = 0.0;           // mean token loss over the global batch
  double grad_norm = 0.0;      // before clipping
  double learning_rate = 0.0;  // the rate this step used
  bool skipped = false;        // non-finite gradient: no update
  // The loss scaler found a non-finite gradient (every rank alike): the update is skipped before
  // any norm is computed (grad_norm is NaN; Megatron's log line then has no grad norm field).
  bool overflow = false;
  // Non-zero: the rerun check ends the run before the update (train/resilience/rerun_check.h).
  int exit_code = 0;
  std::string exit_reason;
  bool exit_saves = true;      // save the state before the iteration first
  // Mixture of experts: Megatron's load-balancing fields of the log line ("load_balancing_loss",
  // "seq_load_balancing_loss", "z_loss": each loss over its coefficient, averaged over the MoE
  // layers, microbatches and data-parallel replicas), in that order, for the losses in use.
  std::vector<std::pair<std::string, double>> moe_losses;
  // With --moe-per-layer-logging: the same per layer, "moe/<name>_layer_<i>" for every layer i of
  // the model (0-based; 0 on a dense layer, as Megatron's tracker), not averaged over the layers.
  std::vector<std::pair<std::string, double>> moe_layer_losses;
  // The expert load: per MoE layer (its global index, in order), the (token, expert) pairs each
  // expert kept over the global batch, summed over every rank (once per TP group).
  std::vector<std::pair<int64_t, std::vector<double>>> moe_tokens_per_expert;
};

// The trainer is the run's progress (train/training_state.h) for the checkpointer; it hands out
// the parts that the code around the loop reads (rank_parameters, checkpointed_state).
class Trainer final : public TrainingProgress {
 public:
  // `args` must have passed validate_arguments and validate_for_world.
  static absl::StatusOr<std::unique_ptr<Trainer>> create(const Arguments& args, ProcessGrid& grid);
  ~Trainer();

  StepResult train_step();
  // The two halves of train_step, for tests that inspect gradients before the update:
  // forward/backward over the iteration's microbatches and gradient reduction, then clipping, the
  // AdamW step and the loss read-out.
  void compute_gradients();
  // `skip_update`: the rerun check's skip (the optimizer does not step; the step counts as skipped).
  StepResult apply_update(bool skip_update = false);
  // Forward only (no gradients) of this rank's microbatch `microbatch` of the next iteration;
  // returns the mean token loss of that microbatch. The logits stay in the output layer. Without
  // pipeline parallelism only (a test hook: the oracle and the data-position tests use it).
  double evaluate_microbatch(int64_t microbatch);
  // Mean token loss over --eval-iters global batches of the validation (or test) split, forward
  // only; validation continues where the previous evaluation stopped, test starts at 0. `verbose`:
  // Megatron's "Evaluating on ... samples" and "Evaluating iter i/N" lines (rank 0).
  double evaluate(Split split, bool verbose = false);

  // Where the data stands (train/training_state.h).
  using DataPosition = gpt::DataPosition;
  DataPosition data_position() const override { return {consumed_samples_, consumed_valid_samples_}; }
  void set_data_position(const DataPosition& position, int64_t iteration) override;
  // The last microbatch this rank loaded into the model (token ids [b, s]).
  const Microbatch& current_microbatch() const { return feed_->last(); }
  // All iterations up to --train-iters, with logging. `after_iteration` (collective; checkpoints
  // and exit conditions) runs at the end of every iteration; when it returns true training stops
  // there, without the final evaluation (Megatron's exit).
  absl::Status run(const std::function<absl::StatusOr<bool>()>& after_iteration = {});
  // Megatron's --check-for-nan-in-loss-and-grad (on unless --no-check-for-nan-in-loss-and-grad):
  // an error when the step's loss (known to the last stage's ranks) or gradient norm (known to
  // all) is not finite, on every rank alike (collective over the pipeline group: one bounded
  // all-reduce of one number, none without pipeline parallelism). The rank that saw it gets the
  // message, the others a peer failure naming it.
  absl::Status check_finite(const StepResult& step);
  // Waits for parameter all-gathers still in flight (--overlap-param-gather leaves them to the next
  // forward): call before reading the parameters outside training (a dump, a checkpoint).
  void synchronize_parameters() { data_parallel_->settle(ctx_); }
  // This rank's parameters for the checks and samples after an iteration, and what a checkpoint
  // saves and restores (train/training_state.h); valid while the trainer lives.
  RankParameters rank_parameters();
  CheckpointedState checkpointed_state();

  Context& context() { return ctx_; }
  const ModelConfig& config() const { return config_; }
  ParamStore& params() { return *params_; }
  // This rank's model chunks (chunk c is virtual stage c * PP + pipeline rank).
  int num_chunks() const { return static_cast<int>(chunks_.size()); }
  GptModel& chunk(int c) { return *chunks_[static_cast<size_t>(c)]; }
  AdamW& optimizer() { return *optimizer_; }
  // The loss scaler's state (--fp16, or --loss-scale), or null without loss scaling.
  const LossScaling* loss_scaling() const { return loss_scaling_.get(); }
  // The learning-rate schedule (in samples) and weight decay of the updates from now on: a resumed
  // run's (train/scheduler_resume.h).
  void set_scheduler(const LrScheduleConfig& schedule, const LrScheduleConfig& decoupled_schedule,
                     double weight_decay) override;
  const LrScheduleConfig& schedule() const { return schedule_; }
  int64_t iteration() const override { return iteration_; }
  int64_t consumed_samples() const { return consumed_samples_; }
  // The global batch size of the last iteration trained (before the first: of the next one), and
  // whether the next iteration's differs (Megatron then saves a checkpoint first).
  int64_t global_batch_size() const { return global_batch_size_; }
  bool batch_size_changes_next() const override {
    return batches_.batch_size_at(consumed_samples_) != global_batch_size_;
  }
  // Total parameters of the global model and the count this rank holds.
  int64_t parameters_on_rank() const;
  // The parts of the run whose non-tensor state checkpoints keep as records (train/checkpoint_records.h),
  // in registration order; the Checkpointer saves and restores them.
  void add_checkpoint_records(CheckpointRecords* owner) { record_owners_.push_back(owner); }
  const std::vector<CheckpointRecords*>& checkpoint_records() const { return record_owners_; }
  // What the arena gave each item of the memory plan (equal to rank_memory: checked at start-up).
  const RankMemory& allocated_memory() const { return allocated_; }

 private:
  Trainer(const Arguments& args, ProcessGrid& grid);
  // After a non-finite gradient norm: the lowest rank holding a non-finite gradient names it.
  void report_non_finite_gradient();
  // This rank's memory figures (memory_report.h); `chunk_bytes` is what building the chunks took.
  MemoryFigures memory_figures(const PipelineLayout& pipeline, double chunk_bytes) const;
  // loss_sum_ read to the host as a mean over `microbatches` microbatches of `ranks` ranks.
  double mean_token_loss(int64_t microbatches, int64_t ranks) const;
  // The same after summing loss_sum_ over the data-parallel group.
  double read_and_reduce_loss(int64_t microbatches);
  // The iteration's end for the MoE layers: the expert bias update, the log line's losses, their
  // per-layer values and the expert load
  // (collectives over every rank), into `result`'s moe_* fields.
  void finish_moe_iteration(StepResult& result);
  void print_evaluation(const std::string& where, double loss) const;

  // run()'s parts (trainer_run.cc). RunReports: the files run() writes (opened before the first
  // iteration) and the statistics of the current log interval.
  struct RunReports;
  absl::Status open_reports(RunReports& reports);
  // train_step timed, checked (the rerun check's exit, non-finite loss or gradient norm) and
  // counted into the interval.
  absl::StatusOr<StepResult> timed_step(RunReports& reports);
  // The iteration's diagnostics (--log-params-norm, --log-num-zeros-in-grad), TensorBoard's
  // iteration scalars, and at an interval's end or the run's first iteration the log line.
  void report_iteration(const StepResult& step, RunReports& reports);
  // The collectives around a log line (stragglers, the rerun check's statistics, timers, the
  // measured timeline), then the line itself on the logging rank; an interval's end starts the next.
  void log_interval(const IterationLog& log, double seconds_per_iteration, double flops_per_iteration,
                    bool interval_end, RunReports& reports);
  // The logging rank's log line, timers, TensorBoard and --metrics-file records, first memory report.
  void print_log_line(const IterationLog& log, double seconds_per_iteration, const std::vector<PhaseTiming>& timers,
                      const std::optional<MeasuredTimeline>& timeline, RunReports& reports);
  // An evaluation of `split` printed and recorded: every --eval-interval iterations, or `final`ly
  // (verbose) after the last iteration.
  void evaluate_and_report(Split split, bool final, RunReports& reports);
  // After the last iteration: the parameter gathers' summary and the per-op profile.
  void report_run_end(const RunReports& reports);

  Arguments args_;
  ProcessGrid& grid_;
  Context ctx_;
  ModelConfig config_;
  std::vector<ParamSpec> specs_;
  Arena arena_;
  std::unique_ptr<ParamStore> params_;
  std::unique_ptr<TensorParallel> tensor_parallel_;
  // FP8 scales of every layer's linears (--fp8-format; null without), and their checkpoint records.
  std::unique_ptr<Fp8Scaling> fp8_;
  std::unique_ptr<CheckpointRecords> fp8_records_;
  std::vector<std::unique_ptr<GptModel>> chunks_;
  std::unique_ptr<MicrobatchFeed> feed_;
  std::vector<std::unique_ptr<ModelStage>> stages_;
  std::unique_ptr<ForwardBackward> forward_backward_;
  std::unique_ptr<DataParallel> data_parallel_;
  // Per-phase seconds of the iterations since the last log line (--timing-log-level >= 1: each
  // phase ends with a wait for the device, as Megatron's timers do).
  struct PhaseTimes {
    double forward_backward = 0, all_grads_sync = 0, optimizer = 0;
    // --timing-log-level 2: core/phase_timer.h's phases, milliseconds.
    std::array<double, phase_timer::kPhases> fine_ms{};
  };
  PhaseTimes phases_;
  bool timing_ = false;
  // The phases are timed (each ends with a wait for the device) for the timers or --log-straggler.
  bool phase_clock_ = false;
  // --rerun-mode / --check-for-spiky-loss (train/resilience/rerun_check.h); nullptr without them.
  std::unique_ptr<RerunCheck> rerun_;

  // Ends a phase started at `since`: adds its seconds to `total` and restarts the clock.
  void end_phase(Stopwatch& since, double& total);
  // The groups the gradient norm (and the diagnostics below) are summed over, by domain.
  NormGroups norm_groups();
  // The groups the loss scaler's overflow count is summed over: the dense norm groups, or the world
  // when expert parameters are apart (their holders are not those of the dense groups).
  std::vector<Communicator*> overflow_groups();
  // --log-params-norm: the L2 norm of the FP32 main weights over the whole model (collective).
  double params_norm();
  // --log-num-zeros-in-grad: zero gradient elements over the whole model (collective).
  int64_t zero_gradients();
  // Adds the phase timers' milliseconds since the last call to phases_.fine_ms.
  void collect_phase_timers();
  // The phases' ms per iteration over the last `iterations`, (min, max) over the world (collective),
  // in Megatron's order; `reset`: start a new interval (false for the first iteration's early log
  // line, as Megatron).
  std::vector<PhaseTiming> phase_timings(int64_t iterations, bool reset);
  Tensor timing_scratch_;  // float32 [2 x phases], for the min/max over ranks
  Tensor moe_scratch_;     // float32 [layers x (4 + E)] with MoE: the per-layer figures summed over ranks
  MemoryFigures memory_;
  RankMemory allocated_;  // what the arena gave each item of the memory plan
  std::vector<CheckpointRecords*> record_owners_;
  Tensor memory_scratch_, memory_gathered_;  // float32, for the start-up memory report
  std::unique_ptr<AdamW> optimizer_;
  std::unique_ptr<LossScaling> loss_scaling_;  // null without loss scaling
  // The scale the loss gradient is multiplied by before backward (1 without loss scaling).
  float loss_scale() const { return loss_scaling_ ? loss_scaling_->scale() : 1.0f; }
  // Updates done so far: iterations less those skipped for overflow (the learning-rate schedule
  // advances only on updates, as Megatron's scheduler steps only after a successful one).
  int64_t updates_done() const { return iteration_ - (loss_scaling_ ? loss_scaling_->skipped_updates() : 0); }
  // The scheduler's samples as the iterations so far imply them: updates x the batch with a
  // constant batch, the consumed samples with a changing one (a checkpoint's record replaces it).
  int64_t scheduler_samples_implied() const;
  // GPT_GRADIENT_FAULT (train/resilience/fault_injection.h): an infinite gradient on this rank now.
  void maybe_inject_gradient_fault();
  std::shared_ptr<const SampleSource> train_data_, valid_data_, test_data_;
  LrScheduleConfig schedule_;
  LrScheduleConfig decoupled_schedule_;  // the word embedding and output layer's (--decoupled-lr)
  Tensor loss_sum_;      // [1] float32, summed token losses of the iteration
  bool loss_on_first_stage_ = false;
  std::unique_ptr<TimelineGather> timeline_;  // --timing-log-level 2 with --metrics-file and PP > 1  // ZB-V's V placement: the last virtual stage is on pipeline rank 0
  Tensor norm_scratch_;  // [1] float32
  Tensor zeros_scratch_;  // [1] int64, for --log-num-zeros-in-grad
  // The batch size as a function of the consumed samples (train/batch_size_schedule.h), and this
  // iteration's: its global batch size and this rank's number of microbatches; evaluation's
  // (--global-batch-size, as Megatron's evaluate) stay constant.
  BatchSizeSchedule batches_;
  int64_t global_batch_size_ = 0;
  int64_t microbatches_ = 1;
  int64_t eval_microbatches_ = 1;
  // Sets the above for the iteration about to start from consumed_samples_ (the pipeline schedule
  // follows a new number of microbatches).
  void begin_batch();
  // The learning-rate schedule's position in samples (Megatron's num_steps), checkpointed.
  std::unique_ptr<SchedulerPosition> scheduler_position_;
  int64_t data_parallel_size_ = 1;
  int64_t iteration_ = 0;
  int64_t consumed_samples_ = 0;
  int64_t consumed_valid_samples_ = 0;
};

}  // namespace gpt
