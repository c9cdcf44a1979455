// The global batch size as a function of the samples consumed so far: Megatron's number-of-
// microbatches calculators (megatron/core/num_microbatches_calculator.py). Three kinds:
//   constant   --global-batch-size every iteration;
//   ramp-up    --rampup-batch-size START INCREMENT SAMPLES (Megatron's RampupBatchsize calculator,
//              deprecated at Megatron's head): START, then + INCREMENT every SAMPLES / n consumed
//              samples, n = (global - START) / INCREMENT, the global batch size past SAMPLES;
//   steps      --step-batch-size-schedule "THRESHOLD:BATCH ..." (StepBatchsize calculator): the
//              batch of the last threshold reached, thresholds in tokens (pretraining passes the
//              sequence length) converted to samples by floor division.
// The iteration consuming samples [c, c + b) uses b = batch_size_at(c); the number of microbatches
// of a data-parallel rank is b / (micro batch x data-parallel size).
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/status.h"

namespace gpt {

class BatchSizeSchedule {
 public:
  static BatchSizeSchedule constant(int64_t global_batch_size);
  // Megatron's checks (the constructor's asserts) as errors naming the flag.
  static absl::StatusOr<BatchSizeSchedule> ramp_up(int64_t start, int64_t increment, int64_t ramp_samples,
                                                   int64_t global_batch_size);
  // `text` as Megatron parses it: entries split on spaces and commas, each "THRESHOLD:BATCH" with
  // an optional K/M/B/T suffix (int(float(value) * multiplier)); thresholds are tokens, divided by
  // `seq_length`; sorted by threshold, which must start at 0 and increase strictly.
  static absl::StatusOr<BatchSizeSchedule> steps(const std::string& text, int64_t seq_length);

  bool is_constant() const { return kind_ == Kind::kConstant; }
  int64_t batch_size_at(int64_t consumed_samples) const;
  // Megatron's update_train_iters for --train-samples: how many iterations the run takes.
  int64_t iterations_for_samples(int64_t train_samples) const;
  // The samples `iterations` iterations from `consumed_samples` consume.
  int64_t samples_after(int64_t consumed_samples, int64_t iterations) const;
  // The batch sizes iterations [first, first + iterations) use from `consumed_samples` on, each
  // change once: (consumed samples where it starts, batch size).
  std::vector<std::pair<int64_t, int64_t>> changes(int64_t consumed_samples, int64_t iterations) const;
  // Every batch size the schedule gives, whatever the samples (ascending).
  std::vector<int64_t> batch_sizes() const;
  // Megatron's start-up lines for rank 0 (empty for a constant batch).
  std::string describe(int64_t micro_batch_times_data_parallel, int64_t seq_length) const;

 private:
  // The consumed samples past `consumed_samples` at which the batch may change (-1: never), and
  // how many iterations from there (at most `limit`) surely keep its batch: the loops above step a
  // constant stretch at a time, so a --train-iters of millions costs a few steps.
  int64_t next_change(int64_t consumed_samples) const;
  int64_t iterations_before(int64_t consumed_samples, int64_t limit) const;

  enum class Kind { kConstant, kRampUp, kSteps };
  Kind kind_ = Kind::kConstant;
  int64_t global_batch_size_ = 0;  // constant, and ramp-up's final size
  int64_t start_ = 0, increment_ = 0, ramp_samples_ = 0;
  double samples_per_increment_ = 0.0;  // Megatron's float ramp_samples / increments
  std::vector<std::pair<int64_t, int64_t>> steps_;  // (threshold samples, batch size), sorted
  std::string text_;                                // the step schedule as given
};

}  // namespace gpt
