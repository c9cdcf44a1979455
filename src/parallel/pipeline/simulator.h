// Runs a Schedule as a discrete-event simulation: each rank executes its steps in order; a compute
// step takes its cost, a transfer step is posted when the rank reaches it and completes when every
// one of its transfers has met its partner on the peer. Transfers are rendezvous (a send waits for
// its receive, as a blocking batched NCCL or MPI exchange does) and are matched per directed pair of
// ranks in posting order, so a simulation that completes proves the schedule cannot deadlock and
// that every tensor reaches the chunk and microbatch that expect it.
//
// Definitions (all ranks start at time 0):
//   makespan         the time the last rank finishes its last step
//   busy(r)          rank r's total compute time
//   idle(r)          makespan - busy(r): warm-up, cool-down, waits on peers and transfer time
//   bubble fraction  (makespan - ideal) / ideal with ideal = max_r busy(r): the bubble time over
//                    the ideal time, Megatron's t_pb / t_id. With uniform costs and free transfers
//                    it is (p - 1) / m for 1F1B and (p - 1) / (v m) for the interleaved schedule.
//   live(r)          (chunk, microbatch) pairs whose forward has run on rank r and whose backward
//                    (with split passes: whose W) is still to come, counted in program order;
//                    peak_live is its maximum.
#pragma once

#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"
#include "parallel/pipeline/schedule.h"

namespace gpt::pipeline {

struct Costs {
  // [rank][chunk]: time of one microbatch's forward / fused backward through that chunk.
  std::vector<std::vector<double>> forward, backward;
  // [rank][chunk]: the weight-gradient part of `backward`: a split backward's W costs this and its
  // B (kBackwardInput) backward - weight. Empty: half of backward.
  std::vector<std::vector<double>> weight;
  double p2p_latency = 0;    // per transfer
  double p2p_bytes = 0;      // size of one activation (or its gradient)
  double p2p_bandwidth = 0;  // bytes per time unit; 0 means unlimited

  // Every rank's layers cost `forward` / `backward` per microbatch, split evenly over its v chunks
  // (so schedules with different v compare at the same model); W is `weight` of the backward
  // (negative: half of it, so F = B = W with backward = 2 forward).
  static Costs uniform(int pipeline_size, int virtual_size, double forward, double backward, double weight = -1);
  // The cost of an instruction's compute on (rank, chunk).
  double compute_time(Op op, int rank, int chunk) const;
  // latency + bytes / bandwidth.
  double transfer_time() const;
};

struct ComputeInterval {
  Instruction instruction;
  int step;  // index in the rank's steps
  double start, end;
};

struct RankTimeline {
  std::vector<ComputeInterval> compute;  // in program order
  double busy = 0;
  double finish = 0;
  double idle = 0;
  int peak_live = 0;
};

struct SimulationReport {
  std::vector<RankTimeline> ranks;
  double makespan = 0;
  double ideal = 0;
  double bubble_fraction = 0;
  // Mean idle(r) / makespan: the share of the devices' time spent not computing.
  double idle_fraction = 0;
};

// Simulates `schedule` against `costs` (sized [p][v]). Errors:
//   InvalidArgument "mismatched transfer: ..." when a send meets a receive expecting another tensor
//     (kind, chunk or microbatch);
//   InvalidArgument "invalid instruction: ..." / "invalid step: ..." for a chunk or microbatch out of
//     range, a transfer to a rank that does not hold the neighbouring virtual stage (or from a stage
//     that has none), an empty step or one mixing compute and transfers;
//   FailedPrecondition "deadlock: ..." when no rank can progress, naming each waiting rank, its
//     step and the transfers no peer has posted (a send with no receive ends this way).
absl::StatusOr<SimulationReport> simulate(const Schedule& schedule, const Costs& costs);

// The schedule checker, in program order: every step is one compute instruction or only transfers;
// each rank runs the forward of every (chunk, microbatch) exactly once and, unless the schedule is
// forward-only (no backward anywhere), its backward exactly once after it, either fused or as B
// then W, each chunk's W in the order of its B; each tensor crossing a
// virtual-stage boundary is sent once after it is computed and received once before it is used,
// from and to the right ranks; a forward-only schedule moves no gradient.
absl::Status check_schedule(const Schedule& schedule);

// The data flow in simulated time: the forward of virtual stage k for microbatch j starts after
// stage k - 1's forward of j ends, and its backward (fused or B) after stage k + 1's backward of j
// (after its own forward on the last stage); a W after its B.
absl::Status check_timeline(const Schedule& schedule, const SimulationReport& report);

// check_schedule, simulate with unit costs, check_timeline: everything a generated schedule must pass.
absl::Status verify_schedule(const Schedule& schedule);

}  // namespace gpt::pipeline
