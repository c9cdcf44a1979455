// Megatron's batch-size flags beyond --global-batch-size: --rampup-batch-size and
// --step-batch-size-schedule (train/batch_size_schedule.h), their refusals as Megatron's
// validate_args and calculators make them, and the schedule the run uses.
#pragma once

#include <cstdint>

#include "core/status.h"
#include "train/args/arguments.h"
#include "train/batch_size_schedule.h"

namespace gpt {

// validate_arguments' part (no world needed): the flags' combinations and the values' syntax.
absl::Status validate_batch_size_flags(const Arguments& args);

// The run's schedule once --global-batch-size is set (validate_for_world fills Megatron's default,
// micro batch x data-parallel size): a ramp-up's checks against its final size.
absl::StatusOr<BatchSizeSchedule> batch_size_schedule_for_world(const Arguments& args);

// The same for arguments that passed validate_for_world.
BatchSizeSchedule batch_size_schedule(const Arguments& args);

// Megatron's consistency check of the batch sizes a run uses from `consumed_samples` over
// `iterations` iterations: each divisible by micro batch x data-parallel size, and the number of
// microbatches never decreasing ("Number of microbatches should not decrease").
absl::Status check_batch_sizes_reached(const Arguments& args, int64_t data_parallel_size, int64_t consumed_samples,
                                       int64_t iterations);

}  // namespace gpt
