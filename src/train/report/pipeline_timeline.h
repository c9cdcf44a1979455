// The measured pipeline timeline: with --timing-log-level 2 and --metrics-file, every pipeline rank
// records the [start, end] of each compute pass of the training iteration (pipeline::Executor,
// waiting for the device at each pass), and at each log line the pipeline group's timelines go to
// the logging rank, which writes one record of the last iteration to the metrics file:
//
//   {"pipeline_timeline": true, "iteration": 20, "schedule": "zb-v", "pipeline_size": 4,
//    "virtual_size": 2, "microbatches": 8, "num_layers": 8,
//    "ranks": [[["F", 0, 0, 0.0, 1.25], ["F", 0, 1, 1.25, 2.5], ...], ...]}
//
// ranks[r] lists rank r's compute passes in program order: op ("F", "B" fused, "Bi" input
// gradient, "W" weight gradient), chunk, microbatch, start and end in milliseconds from the start of
// rank r's pass over its steps (the ranks start together after the previous step's collectives;
// each rank's clock is its own). build/bin/pipeline_schedule --metrics-file reads it back, compares
// it with the simulation and draws it; --pipeline-schedule auto can take its costs.
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "core/context.h"
#include "core/status.h"
#include "parallel/comm/communicator.h"
#include "parallel/pipeline/schedule.h"
#include "train/schedule_choice.h"

namespace gpt {

struct TimedPass {
  pipeline::Instruction instruction;  // a compute instruction
  double start_ms = 0, end_ms = 0;
};

struct MeasuredTimeline {
  int64_t iteration = 0;
  std::string schedule;  // pipeline::to_string of its kind
  int pipeline_size = 1, virtual_size = 1, microbatches = 1;
  int64_t num_layers = 0;
  std::vector<std::vector<TimedPass>> ranks;  // [pipeline rank] in program order
};

// Gathers the pipeline group's timelines of one training schedule; its buffer (every rank's
// passes, two floats each) comes from the arena at construction.
class TimelineGather {
 public:
  TimelineGather(const pipeline::Schedule& schedule, pipeline::ScheduleKind kind, int64_t num_layers, Arena& arena);
  // Collective over `pipeline` (the schedule's ranks): `mine` is this rank's
  // ForwardBackward::timeline() (seconds, one pair per compute step).
  MeasuredTimeline gather(Context& ctx, Communicator& pipeline, std::span<const std::pair<double, double>> mine,
                          int64_t iteration);

 private:
  pipeline::Schedule schedule_;
  pipeline::ScheduleKind kind_;
  int64_t num_layers_;
  size_t most_passes_ = 0;  // the largest rank's compute steps
  Tensor mine_, all_;       // float32 [2 most_passes_], [p 2 most_passes_]
};

// The record's JSON line (no newline).
std::string timeline_record(const MeasuredTimeline& timeline);

// The last pipeline_timeline record of a metrics file; an error names the file and what is wrong
// (no such record, a malformed one).
absl::StatusOr<MeasuredTimeline> read_last_timeline(const std::string& path);

// Per virtual stage, the mean measured F, B and W of one microbatch (milliseconds). A fused
// backward counts as B + W, split in the ratio the timeline's split passes show (half each when it
// has none).
StageCosts stage_costs_from_timeline(const MeasuredTimeline& timeline, const std::string& source);

// --pipeline-schedule-costs: the costs of the metrics file's last timeline, which must have been
// measured on the layout of `args` (pipeline size, chunks per rank, layers); errors name the flag.
absl::StatusOr<StageCosts> measured_stage_costs(const Arguments& args);

// The measured timeline as a simulation report (each rank's busy time, idle time against the
// latest finish, the bubble fraction as the simulator defines it), for comparison and drawing.
pipeline::SimulationReport measured_report(const MeasuredTimeline& timeline);

}  // namespace gpt
