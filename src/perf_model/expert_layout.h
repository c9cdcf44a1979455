// The expert grid of an MoE layout for the performance model (EP-DESIGN.md; Megatron's second
// RankGenerator): ETP x EP x EDP x PP over the same world, EDP = world / (ETP x EP x PP), ETP
// --expert-tensor-parallel-size (TP when not given), EP --expert-model-parallel-size.
//
// perf_model predicts layouts the trainer may not run yet: validate_layout checks the expert flags
// here, as Megatron does, and pretrain_gpt's own checks on the rest of the layout (an EP-free copy).
// What the expert grid changes against the plan of the same layout with EP 1 and ETP = TP:
//   parameters   each MoE layer's routed experts on a rank: E / EP experts split over ETP
//                (moe_ops.h's expert_parameters_per_rank) instead of E split over TP
//   gradients    the same elements, reduced over EDP (the dense ones over DP x CP)
//   optimizer    the expert elements' state, sharded over EDP with the distributed optimizer
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "model/config.h"
#include "train/args/arguments.h"

namespace gpt::perf {

struct ExpertGrid {
  int64_t expert_model = 1;   // EP
  int64_t expert_tensor = 1;  // ETP
  int64_t expert_data = 1;    // EDP
  bool moe = false;           // the model has MoE layers
};

// The grid of a layout (its flags as given; EP 1 and ETP = TP for a dense model).
ExpertGrid expert_grid(const Arguments& args, int64_t world_size);

// Megatron's checks of the expert flags for an MoE model: one message naming the flags.
absl::Status check_expert_grid(const Arguments& args, int64_t world_size);

// `args` with EP 1 and ETP not given (the layout pretrain_gpt checks today), and the inverse.
Arguments without_expert_grid(Arguments args);
Arguments with_expert_grid(Arguments validated, const Arguments& given);

// The largest pipeline rank's routed-expert parameter elements: as the memory plan of the same
// layout with EP 1 and ETP = TP holds them (E experts split over TP), and under the grid.
struct ExpertElements {
  double planned = 0, actual = 0;
};
ExpertElements expert_elements(const Arguments& args, const ModelConfig& config, int64_t world_size);

// The most MoE layers any pipeline rank holds: `stage_layers` per virtual stage c x PP + rank
// (train/pipeline_split.h), the layers numbered in stage order.
int64_t rank_moe_layers(const ModelConfig& config, const std::vector<int64_t>& stage_layers, int64_t pipeline);

}  // namespace gpt::perf
