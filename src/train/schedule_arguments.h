// The learning-rate schedule's flags: Megatron's rules on the run's length and the schedule's
// units, and the schedule in samples they give (optim/lr_schedule.h).
#pragma once

#include "core/status.h"
#include "train/arguments.h"

namespace gpt {

// validate_arguments' part: --train-iters with iteration-based schedule flags, or --train-samples
// with sample-based ones (a warmup of 0 in the other unit allowed, as Megatron).
absl::Status validate_schedule_arguments(const Arguments& args);

// Megatron's learning-rate schedule in samples (training.py get_optimizer_param_scheduler):
// iteration-based lengths times the global batch size, sample-based ones as given, a warmup
// fraction of the decay samples kept fractional. For arguments that passed validate_for_world.
LrScheduleConfig lr_schedule_config(const Arguments& args);
// The schedule of the word embedding and output layer: lr_schedule_config with --decoupled-lr as
// its peak and --decoupled-min-lr (default --min-lr) as its minimum (Megatron's param-group
// max_lr / min_lr overrides); lr_schedule_config itself without --decoupled-lr.
LrScheduleConfig decoupled_lr_schedule_config(const Arguments& args);

}  // namespace gpt
