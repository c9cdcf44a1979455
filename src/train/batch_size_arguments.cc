#include "train/batch_size_arguments.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "core/check.h"
#include "train/flag_table.h"
#include "train/pipeline_arguments.h"

namespace gpt {

using A = Arguments;  // rows are named by field: flag_name(&A::save_interval)

namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

absl::StatusOr<BatchSizeSchedule> build(const Arguments& a, int64_t global_batch_size) {
  if (!a.rampup_batch_size.empty()) {
    int64_t values[3] = {0, 0, 0};
    if (a.rampup_batch_size.size() != 3) {
      return invalid(absl::StrCat(flag_name(&A::rampup_batch_size),
                                  " takes 3 integers (start batch size, increment, ramp-up "
                                  "samples), got ",
                                  a.rampup_batch_size.size()));
    }
    for (size_t i = 0; i < 3; ++i) {
      if (!absl::SimpleAtoi(a.rampup_batch_size[i], &values[i])) {
        return invalid(
            absl::StrCat(flag_name(&A::rampup_batch_size), ": \"", a.rampup_batch_size[i], "\" is not an integer"));
      }
    }
    return BatchSizeSchedule::ramp_up(values[0], values[1], values[2], global_batch_size);
  }
  if (flag_given(a, &A::step_batch_size_schedule))
    return BatchSizeSchedule::steps(a.step_batch_size_schedule, a.seq_length);
  return BatchSizeSchedule::constant(global_batch_size);
}

}  // namespace

absl::Status validate_batch_size_flags(const Arguments& a) {
  const bool ramp = !a.rampup_batch_size.empty(), steps = flag_given(a, &A::step_batch_size_schedule);
  if (ramp && steps) {
    return invalid(absl::StrCat(flag_name(&A::rampup_batch_size), " and ", flag_name(&A::step_batch_size_schedule),
                                " cannot both be given (Megatron's head "
                                "replaced the first by the second)"));
  }
  // Megatron's validate_args (head): the schedule gives every batch size.
  if (steps && flag_given(a, &A::global_batch_size)) {
    return invalid(absl::StrCat("Cannot specify both ", flag_name(&A::step_batch_size_schedule), " and ",
                                flag_name(&A::global_batch_size)));
  }
  // Megatron's validate_args for iteration-based training (until the ramp-up calculator's removal).
  if (ramp && !flag_given(a, &A::train_samples)) {
    return invalid(absl::StrCat(flag_name(&A::rampup_batch_size), " needs ", flag_name(&A::train_samples),
                                ": expected no batch-size rampup for iteration-based "
                                "training (",
                                flag_name(&A::train_iters), ")"));
  }
  if (!ramp && !steps) return absl::OkStatus();
  if (a.timing_log_level >= 2 && !a.metrics_file.empty() && a.pipeline_model_parallel_size > 1) {
    return invalid(absl::StrCat(ramp ? flag_name(&A::rampup_batch_size) : flag_name(&A::step_batch_size_schedule),
                                " with ", flag_name(&A::timing_log_level), " 2, ", flag_name(&A::metrics_file),
                                " and pipeline parallelism: the measured "
                                "pipeline timeline is drawn against one schedule, and a changing batch size changes "
                                "the schedule"));
  }
  if (steps) return build(a, 0).status();
  // A ramp-up's final size is --global-batch-size, or micro batch x data-parallel size when not
  // given: then its checks wait for the world (batch_size_schedule_for_world).
  if (flag_given(a, &A::global_batch_size)) return build(a, a.global_batch_size).status();
  return absl::OkStatus();
}

absl::StatusOr<BatchSizeSchedule> batch_size_schedule_for_world(const Arguments& a) {
  return build(a, a.global_batch_size);
}

BatchSizeSchedule batch_size_schedule(const Arguments& a) {
  GPT_CHECK_GT(a.global_batch_size, 0) << "batch size schedule before validate_for_world";
  absl::StatusOr<BatchSizeSchedule> schedule = batch_size_schedule_for_world(a);
  GPT_CHECK(schedule.ok()) << "batch size schedule of validated arguments: " << schedule.status();
  return *std::move(schedule);
}

absl::Status check_batch_sizes_reached(const Arguments& a, int64_t dp, int64_t consumed_samples, int64_t iterations) {
  const BatchSizeSchedule schedule = batch_size_schedule(a);
  if (schedule.is_constant()) return absl::OkStatus();  // validate_for_world checked the one batch
  const int64_t per_microbatch = a.micro_batch_size * dp;
  int64_t previous = 0;
  for (const auto& [at, batch] : schedule.changes(consumed_samples, iterations)) {
    if (batch % per_microbatch != 0) {
      return invalid(absl::StrCat("current global batch size (", batch, ", from ", at,
                                  " consumed samples on) is not divisible by micro_batch_size (", a.micro_batch_size,
                                  ") * data_parallel_size (", dp, ")"));
    }
    if (batch < previous) {
      return invalid(absl::StrCat("Number of microbatches should not decrease; going from ", previous / per_microbatch,
                                  " to ", batch / per_microbatch, " at ", at, " consumed samples"));
    }
    previous = batch;
    // The pipeline layout's rules for this number of microbatches (validate_for_world checked the
    // ones a fresh run reaches; a resumed run may reach others).
    const int64_t p = a.pipeline_model_parallel_size;
    const int64_t layers_per_virtual_stage =
        a.num_virtual_stages_per_pipeline_rank > 0 ? a.num_layers / (p * a.num_virtual_stages_per_pipeline_rank)
                                                   : a.num_layers_per_virtual_pipeline_stage;
    GPT_RETURN_IF_ERROR(validate_schedule_for_layout(a, static_cast<int>(p), static_cast<int>(layers_per_virtual_stage),
                                                     static_cast<int>(batch / per_microbatch)));
  }
  return absl::OkStatus();
}

}  // namespace gpt
