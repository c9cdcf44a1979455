// The pipeline schedule's flags (--pipeline-schedule, --pipeline-schedule-costs): the names, and
// whether the layout's chunks can run the schedule named (each refusal names the flags to change).
#pragma once

#include "core/status.h"
#include "train/arguments.h"

namespace gpt {

// validate_arguments' part: the schedule's name, --pipeline-schedule-costs only with auto.
absl::Status validate_schedule_flags(const Arguments& args);

// validate_for_world's part, with the layout's sizes (p, --num-layers-per-virtual-pipeline-stage
// or its equivalent, 0 without chunks; the number of microbatches): Megatron's layout rules
// (pipeline::validate_pipeline_layout) where the schedule needs them; zb-v's two chunks per rank;
// 1f1b and zb-h1 one, interleaved more. auto needs only what one of its candidates runs.
absl::Status validate_schedule_for_layout(const Arguments& args, int pipeline_size, int layers_per_virtual_stage,
                                          int microbatches);

}  // namespace gpt
