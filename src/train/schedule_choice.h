// --pipeline-schedule auto: the schedule of the layout's chunks (1F1B or ZB-H1 with one chunk per
// rank; interleaved or ZB-V with two; interleaved with more) that the simulator finds fastest
// among those whose memory plan fits, from per-virtual-stage costs of the forward (F), the
// input-gradient backward (B) and the weight-gradient backward (W) of one microbatch:
//   - FLOP counts (stage_costs_from_flops): Megatron's formula (train/report/flops.h) split per pass. A
//     layer's F is 4 b s h^2 [(1 + groups/heads + s/h)(heads d / h) + g ffn / h]; its W the weight
//     GEMMs' part, 4 b s h^2 [(1 + groups/heads)(heads d / h) + g ffn / h]; B = 2 F - W (plus the
//     recomputed forward: a fully recomputed layer's F, selective recompute's attention core). The
//     last stage adds the LM head (F = W = B = 2 b s h V). Element-wise work and transfers are not
//     counted: a relative measure.
// The choice is deterministic, so every rank makes the same one.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "core/status.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/simulator.h"
#include "train/args/arguments.h"
#include "train/memory_plan.h"

namespace gpt {

// [virtual stage k = 0 .. p v - 1], in model order: the time of one microbatch's pass through the
// stage's layers (the first stage with the embedding, the last with the head and the loss).
struct StageCosts {
  std::vector<double> forward, backward_input, weight;
  std::string source;  // for the start-up message: "FLOP counts", "measured in FILE (iteration N)"
};

// For validated arguments with `vocab_size` the vocabulary before padding.
StageCosts stage_costs_from_flops(const Arguments& args, int64_t vocab_size);

// The costs placed on (rank, chunk) as `placement` puts the stages; a fused backward costs B + W.
pipeline::Costs placed_costs(const StageCosts& costs, pipeline::Placement placement, int pipeline_size,
                             int virtual_size);

struct ScheduleCandidate {
  pipeline::ScheduleKind kind;
  double makespan = 0;  // simulated forward-backward of one iteration, in the costs' unit
  double bubble = 0;    // the simulator's bubble fraction
  int64_t memory_bytes = 0;  // the worst rank's plan (exact where the layout is small enough)
  bool fits = true;
  std::string refusal;  // why it does not fit (check_memory_plan's message)
};

struct ScheduleChoice {
  pipeline::ScheduleKind kind;
  std::vector<ScheduleCandidate> candidates;  // Megatron's schedule for the layout first
  // "--pipeline-schedule auto: zb-h1, the fastest that fits (costs: ...)" and one line per candidate.
  std::string explanation;
};

// The schedules the layout's chunks can run, Megatron's first: v = 1: 1f1b, zb-h1; v = 2:
// interleaved when m is a multiple of p, zb-v; v > 2: interleaved; p = 1: 1f1b. Without
// `deferred_weight_gradients` (ZeRO-2 and ZeRO-3, whose unit gradient buffers cannot wait for a
// deferred weight-gradient pass) the zero-bubble schedules are left out.
std::vector<pipeline::ScheduleKind> schedule_candidates(int pipeline_size, int virtual_size, int microbatches,
                                                        bool deferred_weight_gradients = true);

// The candidates (schedule_candidates), each simulated with `costs` and planned
// against `budget`; the fastest that fits, Megatron's schedule on a tie (within 1e-9 relative) or
// when none fits (the memory check then refuses the run). `args` validated, its
// --pipeline-schedule ignored.
absl::StatusOr<ScheduleChoice> choose_schedule(const Arguments& args, int64_t world_size, int64_t vocab_size,
                                               const StageCosts& costs, const MemoryBudget& budget);

}  // namespace gpt
