// The pipeline schedule's flags (--pipeline-schedule, --pipeline-schedule-costs, Megatron's
// --microbatch-group-size-per-virtual-pipeline-stage and --overlap-p2p-communication-warmup-flush):
// the names, and whether the layout's chunks can run the schedule named (each refusal names the
// flags to change). Both Megatron flags belong to its interleaved schedule: with this program's
// zb-h1, zb-v and auto they are refused; warmup-flush without model chunks is refused as Megatron
// refuses it (its overlap_p2p_comm is off without interleaving); the group size without model
// chunks is accepted and groups nothing, as in Megatron.
#pragma once

#include "core/status.h"
#include "train/args/arguments.h"

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
