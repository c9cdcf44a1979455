// --log-straggler (Megatron's straggler detector, its report without the GPU's power, temperature,
// utilization and clock): every --log-interval iterations each rank gives its compute time (the
// forward-backward phase, per iteration, averaged over the interval) and its node; rank 0 prints
//
//   [2026-11-26 04:10:00] | MnRtt/Rnk: 10.52ms/0 (vm) | MxRtt/Rnk: 212.31ms/3 (n2) | MnEtpt/Rnk: 0.01TF/3 (n2) | MxEtpt/Rnk: 0.25TF/0 (vm)
//
// (Rtt: compute time, Etpt: estimated TFLOP/s, each with the rank and its node), and with
// --straggler-minmax-count N (1 < N < world size) Megatron's two lines of the N ranks with the
// lowest and the highest throughput. A rank's throughput is its share of the model's FLOPs per
// iteration (the total / world size) over its compute time.
#pragma once

#include <string>
#include <vector>

#include "parallel/process_grid.h"

namespace gpt {

struct RankComputeTime {
  int rank = 0;
  std::string node;
  double compute_ms = 0.0;  // per iteration
};

// One rank's entry as text for the gather to rank 0, and back.
std::string encode_rank_compute_time(const RankComputeTime& mine);
RankComputeTime decode_rank_compute_time(const std::string& text);

// The report's lines (newline-separated, no trailing newline); `ranks` in any order, not empty.
std::string format_straggler_report(const std::vector<RankComputeTime>& ranks, double flops_per_rank_per_iteration,
                                    int minmax_count, const std::string& timestamp);

// Gathers every rank's compute time (ms per iteration) and node to rank 0, which prints the report
// (stdout). Collective over the world.
void report_stragglers(const ProcessGrid& grid, double compute_ms, double flops_per_rank_per_iteration,
                       int minmax_count);

// This host's name (never a launcher's variable: under mpirun inside sbatch every rank inherits
// the batch step's node). Tests pretend another node with GPT_TEST_NODE_NAME.
std::string node_name();

}  // namespace gpt
