// perf_calibrate's trainer probes (docs/PERFORMANCE_MODEL.md, "Host overhead"): small layouts run
// through the trainer's own train_step on every rank of the world, each timed and predicted with
// the model priced by the microbenchmarks alone, for perf/overhead_fit.h to fit the host's work
// per op, per chunk pass, per communication call and per iteration.
#pragma once

#include <cstdint>
#include <vector>

#include "core/status.h"
#include "perf_model/cluster.h"
#include "perf_model/overhead_fit.h"

namespace gpt {

struct ProbeModel {
  // The calibration model's widths (perf_calibrate's --hidden-size ...); the probes vary its depth,
  // microbatches and layout.
  int64_t hidden = 128, heads = 4, seq = 64, micro_batch = 2, vocab = 1024;
  bool bf16 = false, gpu = false;
  // Each probe runs `passes` times, the passes alternating the probes' order (as the sweep's trials
  // do), so that a busy moment of a shared machine is spread over all probes rather than one.
  int passes = 3, warmup_steps = 2, timed_steps = 5;
};

// Collective over the world: every rank runs every probe. Each sample's measured_s is the slowest
// rank's median over all passes' timed steps; predicted_s and the counts come from perf::predict with `priced` (whose
// overhead terms must be 0).
absl::StatusOr<std::vector<perf::OverheadSample>> time_trainer_probes(const ProbeModel& model, int world_size,
                                                                       const perf::Cluster& priced);

}  // namespace gpt
