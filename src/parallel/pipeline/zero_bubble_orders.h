// The zero-bubble schedules' compute orders per rank (Qi et al., "Zero Bubble Pipeline
// Parallelism", ICLR 2024), which lower_compute_orders (schedule.h) turns into steps.
#pragma once

#include <vector>

#include "absl/status/statusor.h"
#include "parallel/pipeline/schedule.h"

namespace gpt::pipeline {

// ZB-H1's handcrafted order for rank `rank` of p, m microbatches (v = 1).
std::vector<Instruction> zero_bubble_h1_order(int p, int m, int rank);

// ZB-V's orders for every rank (Placement::kV, v = 2); an internal error if the list schedule stalls.
absl::StatusOr<std::vector<std::vector<Instruction>>> zero_bubble_v_orders(int p, int m);

}  // namespace gpt::pipeline
