// The learning-rate schedule's flags: Megatron's rules on the run's length and the schedule's
// units (the schedule in samples they give: lr_schedule_config, train/configs.h).
#pragma once

#include "core/status.h"
#include "train/arguments.h"

namespace gpt {

// validate_arguments' part: --train-iters with iteration-based schedule flags, or --train-samples
// with sample-based ones (a warmup of 0 in the other unit allowed, as Megatron).
absl::Status validate_schedule_arguments(const Arguments& args);


}  // namespace gpt
