// pipeline_schedule: generates a pipeline schedule for a layout given with Megatron's flags,
// simulates it, and shows what each rank runs, the bubble against Megatron's formula, the peak
// number of microbatches holding activations, and (with --svg) a Gantt chart:
//
//   pipeline_schedule --pipeline-model-parallel-size 4 --num-layers-per-virtual-pipeline-stage 1
//       --num-layers 8 --num-microbatches 8 [--schedule 1f1b|interleaved|afab|zb-h1|zb-v] [--svg out.svg]
//       [--microbatch-group-size-per-virtual-pipeline-stage N]
//       [--forward-cost 1 --backward-cost 2 --weight-cost 1] [--p2p-latency 0 --p2p-bytes 0 --p2p-bandwidth 0]
//
// --forward-cost / --backward-cost are one microbatch's time through one rank's layers (all its
// model chunks); each chunk takes 1/v of it. --weight-cost is the weight-gradient part of the
// backward (W of a split backward; its B takes the rest), half of it by default. With one chunk
// per rank the tool also prints 1F1B and ZB-H1 of the layout side by side (bubble, peak live
// microbatches, weight-gradient passes waiting); with two, interleaved and ZB-V. --bubble-table prints the markdown table of simulated
// bubbles against the formulas that docs/PIPELINE.md shows. --metrics-file FILE compares the
// measured pipeline timeline a pretrain_gpt run wrote (--timing-log-level 2) with its simulation.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <fstream>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "CLI/CLI.hpp"
#include "cli_parse.h"
#include "core/status.h"
#include "core/strict_number.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "parallel/pipeline/gantt_svg.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/simulator.h"
#include "train/report/pipeline_timeline.h"
#include "train/args/numeric_flags.h"
#include "train/schedule_choice.h"

namespace gpt::pipeline {
namespace {

using gpt::MeasuredTimeline;
using gpt::StageCosts;

struct Options {
  int pipeline_size = 1;
  int layers_per_virtual_stage = 0;  // 0: no interleaving
  int num_layers = 0;
  int microbatches = 0;
  int microbatch_group = 0;  // the interleaved schedule's group size; 0: p (Megatron's default)
  std::string schedule;  // empty: Megatron's choice for the layout
  bool forward_only = false;
  std::string svg;
  double forward_cost = 1, backward_cost = 2;
  std::optional<double> weight_cost;  // not given: backward / 2
  double p2p_latency = 0, p2p_bytes = 0, p2p_bandwidth = 0;
  bool quiet = false;
  bool bubble_table = false;
  std::string metrics_file;  // a pretrain_gpt --metrics-file with a pipeline timeline
};

std::string formula_text(ScheduleKind kind, int p, int v, int m) {
  if (kind == ScheduleKind::kZeroBubbleH1) return absl::StrFormat("(p-1)/(3m) = %d/%d", p - 1, 3 * m);
  if (kind == ScheduleKind::kZeroBubbleV) return absl::StrFormat("(p-1)/(6m) = %d/%d", p - 1, 6 * m);
  if (v == 1) return absl::StrFormat("(p-1)/m = %d/%d", p - 1, m);
  return absl::StrFormat("(p-1)/(v m) = %d/%d", p - 1, v * m);
}

std::string peak_formula_text(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kAllForwardAllBackward: return "m v";
    case ScheduleKind::kOneFOneB: return "min(p - r, m)";
    case ScheduleKind::kInterleaved: return "min((p-r-1)*2 + (v-1)*n + 1, m v), n the microbatch group";
    case ScheduleKind::kZeroBubbleH1: return "min(p, m)";
    case ScheduleKind::kZeroBubbleV: return "at most min(2p, 2m)";
  }
  return "";
}

Costs costs_for(const Schedule& schedule, const Options& o) {
  Costs costs =
      Costs::uniform(schedule.pipeline_size, schedule.virtual_size, o.forward_cost, o.backward_cost,
                     o.weight_cost.value_or(o.backward_cost / 2));
  costs.p2p_latency = o.p2p_latency;
  costs.p2p_bytes = o.p2p_bytes;
  costs.p2p_bandwidth = o.p2p_bandwidth;
  return costs;
}

absl::StatusOr<SimulationReport> simulate_uniform(const Schedule& schedule, const Options& o) {
  const Costs costs = costs_for(schedule, o);
  if (absl::Status status = check_schedule(schedule); !status.ok()) return status;
  absl::StatusOr<SimulationReport> report = simulate(schedule, costs);
  if (!report.ok()) return report;
  if (absl::Status status = check_timeline(schedule, *report); !status.ok()) return status;
  return report;
}

// Simulated bubble against the formula over a grid of layouts, uniform costs and free transfers.
absl::Status print_bubble_table(const Options& o) {
  std::printf("| p | v | m | schedule | simulated bubble | formula | AFAB bubble | peak live, rank 0 | AFAB peak |\n");
  std::printf("|---|---|---|---|---|---|---|---|---|\n");
  for (int p : {2, 4, 8}) {
    for (int v : {1, 2, 4}) {
      for (int m : {8, 16, 32}) {
       for (ScheduleKind kind : {default_schedule_kind(v), ScheduleKind::kZeroBubbleH1, ScheduleKind::kZeroBubbleV}) {
        if (kind == ScheduleKind::kZeroBubbleH1 && v > 1) continue;
        if (kind == ScheduleKind::kZeroBubbleV && v != 2) continue;
        absl::StatusOr<Schedule> schedule = make_schedule(kind, p, v, m);
        absl::StatusOr<Schedule> afab = make_schedule(ScheduleKind::kAllForwardAllBackward, p, v, m);
        if (!schedule.ok()) return schedule.status();
        if (!afab.ok()) return afab.status();
        absl::StatusOr<SimulationReport> report = simulate_uniform(*schedule, o);
        absl::StatusOr<SimulationReport> afab_report = simulate_uniform(*afab, o);
        if (!report.ok()) return report.status();
        if (!afab_report.ok()) return afab_report.status();
        std::printf("| %d | %d | %d | %s | %.4f | %.4f (%s) | %.4f | %d (%.2f microbatches) | %d |\n", p, v, m,
                    to_string(kind), report->bubble_fraction, expected_bubble_fraction(kind, p, v, m),
                    formula_text(kind, p, v, m).c_str(), afab_report->bubble_fraction, report->ranks[0].peak_live,
                    static_cast<double>(report->ranks[0].peak_live) / v, afab_report->ranks[0].peak_live);
       }
      }
    }
  }
  return absl::OkStatus();
}

// The largest schedule drawn: p x v x m (model chunk, microbatch) pairs per iteration, each a few
// instructions on its rank and a few events in the simulation (about 600 bytes in all, measured:
// 2^22 pairs took 2.5 GB and 19 s): 2^20 is about 0.6 GB, and beyond real layouts (p 64, v 8, m 2048).
constexpr int64_t kMaxChunkMicrobatches = int64_t{1} << 20;

// The largest cost (forward, backward, weight, one transfer) in any unit: with at most 2^20 pairs
// of three passes each, every sum the simulation makes stays far inside a double.
constexpr double kMaxCost = 1e12;
constexpr double kMaxBytes = 1e18;  // --p2p-bytes, --p2p-bandwidth

// What the simulator cannot make sense of: negative, non-finite or overflowing costs and link
// parameters, a weight-gradient pass longer than the backward it is part of. The costs' flags keep
// their text to here (CLI11 reads "nan" as NaN), so that every refusal names the flag the same way.
absl::Status check_costs(const Options& o) {
  std::vector<std::pair<const char*, double>> values = {{"--forward-cost", o.forward_cost},
                                                        {"--backward-cost", o.backward_cost},
                                                        {"--p2p-latency", o.p2p_latency},
                                                        {"--p2p-bytes", o.p2p_bytes},
                                                        {"--p2p-bandwidth", o.p2p_bandwidth}};
  if (o.weight_cost) values.insert(values.begin() + 2, {"--weight-cost", *o.weight_cost});
  for (const auto& [flag, value] : values) {
    if (!std::isfinite(value) || value < 0) {
      return absl::InvalidArgumentError(absl::StrCat(flag, " must be a finite number >= 0 (got ", value, ")"));
    }
    // Bytes and bandwidth only meet as their ratio (checked below as a transfer time).
    const double most = std::string_view(flag).starts_with("--p2p-b") ? kMaxBytes : kMaxCost;
    if (value > most) {
      return absl::InvalidArgumentError(
          absl::StrCat(flag, " must be at most ", number_text(most), " (got ", number_text(value), ")"));
    }
  }
  if (o.forward_cost + o.backward_cost <= 0) {
    return absl::InvalidArgumentError("--forward-cost and --backward-cost cannot both be 0 (no work to schedule)");
  }
  // W is part of the backward (its B takes the rest): a larger W would make B's time negative.
  if (o.weight_cost && *o.weight_cost > o.backward_cost) {
    return absl::InvalidArgumentError(absl::StrCat("--weight-cost ", number_text(*o.weight_cost),
                                                   " is more than --backward-cost ", number_text(o.backward_cost),
                                                   ": the weight-gradient pass is part of the backward"));
  }
  Costs link;
  link.p2p_latency = o.p2p_latency;
  link.p2p_bytes = o.p2p_bytes;
  link.p2p_bandwidth = o.p2p_bandwidth;
  const double transfer = link.transfer_time();
  if (!(transfer <= kMaxCost)) {
    return absl::InvalidArgumentError(absl::StrCat(
        "a transfer takes --p2p-latency + --p2p-bytes / --p2p-bandwidth = ", number_text(transfer),
        ", more than the largest cost (", number_text(kMaxCost), "): lower --p2p-bytes or raise --p2p-bandwidth"));
  }
  return absl::OkStatus();
}

// --metrics-file: the last measured pipeline timeline of a pretrain_gpt run (train/report/pipeline_timeline.h)
// against the simulation of the same schedule with the costs measured in it (per virtual stage, the
// mean F, B and W), and every schedule of the layout simulated with those costs; --svg draws the
// measured timeline.
absl::Status compare_measured(const Options& o) {
  GPT_ASSIGN_OR_RETURN(const MeasuredTimeline measured, read_last_timeline(o.metrics_file));
  GPT_ASSIGN_OR_RETURN(const ScheduleKind kind, parse_schedule_kind(measured.schedule));
  const int p = measured.pipeline_size, v = measured.virtual_size, m = measured.microbatches;
  GPT_ASSIGN_OR_RETURN(const Schedule schedule, make_schedule(kind, p, v, m));
  const StageCosts costs = stage_costs_from_timeline(measured, o.metrics_file);
  const SimulationReport actual = measured_report(measured);
  GPT_ASSIGN_OR_RETURN(const SimulationReport simulated,
                       simulate(schedule, placed_costs(costs, schedule.placement, p, v)));
  std::printf("measured: %s, PP %d, %d model chunk%s per rank, %d microbatches, %lld layers; iteration %lld of %s\n",
              to_string(kind), p, v, v > 1 ? "s" : "", m, static_cast<long long>(measured.num_layers),
              static_cast<long long>(measured.iteration), o.metrics_file.c_str());
  std::printf("mean pass per virtual stage (ms):");
  for (size_t k = 0; k < costs.forward.size(); ++k) {
    std::printf(" [%zu] F %.3f B %.3f W %.3f", k, costs.forward[k], costs.backward_input[k], costs.weight[k]);
  }
  std::printf("\n\n                 makespan (ms)  bubble   idle share\n");
  std::printf("measured         %-13.3f  %.4f   %.4f\n", actual.makespan, actual.bubble_fraction, actual.idle_fraction);
  std::printf("simulated        %-13.3f  %.4f   %.4f   (measured costs, free transfers)\n", simulated.makespan,
              simulated.bubble_fraction, simulated.idle_fraction);
  std::printf("\nrank  measured busy  idle      simulated busy  idle\n");
  for (int r = 0; r < p; ++r) {
    const RankTimeline &a = actual.ranks[static_cast<size_t>(r)], &s = simulated.ranks[static_cast<size_t>(r)];
    std::printf("%-4d  %-13.3f  %-8.3f  %-14.3f  %.3f\n", r, a.busy, a.idle, s.busy, s.idle);
  }
  std::printf("\nschedules of this layout with the measured costs (simulated):\n");
  for (ScheduleKind other : schedule_candidates(p, v, m)) {
    GPT_ASSIGN_OR_RETURN(const Schedule candidate, make_schedule(other, p, v, m));
    GPT_ASSIGN_OR_RETURN(const SimulationReport report,
                         simulate(candidate, placed_costs(costs, candidate.placement, p, v)));
    std::printf("  %-12s makespan %.3f ms, bubble %.4f (uniform-cost formula %.4f)\n", to_string(other),
                report.makespan, report.bubble_fraction, expected_bubble_fraction(other, p, v, m));
  }
  if (!o.svg.empty()) {
    const std::string title = absl::StrFormat("%s, PP=%d, v=%d, m=%d, measured (ms): bubble %.4f, simulated %.4f",
                                              to_string(kind), p, v, m, actual.bubble_fraction,
                                              simulated.bubble_fraction);
    std::ofstream out(o.svg);
    out << gantt_svg(schedule, actual, {.title = title});
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", o.svg));
    std::printf("\nwrote %s\n", o.svg.c_str());
  }
  return absl::OkStatus();
}

absl::Status run(const Options& o) {
  GPT_RETURN_IF_ERROR(check_costs(o));
  if (o.bubble_table) return print_bubble_table(o);
  if (!o.metrics_file.empty()) return compare_measured(o);
  if (absl::Status status = validate_pipeline_layout(o.num_layers, o.pipeline_size, o.layers_per_virtual_stage,
                                                     o.microbatches, o.microbatch_group);
      !status.ok()) {
    return status;
  }
  absl::StatusOr<int> virtual_size = virtual_pipeline_size(o.num_layers, o.pipeline_size, o.layers_per_virtual_stage);
  if (!virtual_size.ok()) return virtual_size.status();
  const int p = o.pipeline_size, v = *virtual_size, m = o.microbatches;
  // Sizes before allocation: a schedule is built whole, then simulated.
  if (static_cast<int64_t>(p) * v * m > kMaxChunkMicrobatches) {
    return absl::InvalidArgumentError(absl::StrCat(
        "PP ", p, " x ", v, " model chunks x ", m, " microbatches = ", static_cast<int64_t>(p) * v * m,
        " (chunk, microbatch) pairs: more than this tool draws (", kMaxChunkMicrobatches, ")"));
  }
  ScheduleKind kind = default_schedule_kind(v);
  if (!o.schedule.empty()) {
    absl::StatusOr<ScheduleKind> parsed = parse_schedule_kind(o.schedule);
    if (!parsed.ok()) return parsed.status();
    kind = *parsed;
  }
  const int n = o.microbatch_group;
  absl::StatusOr<Schedule> schedule = o.forward_only ? make_forward_only_schedule(p, v, m, Placement::kLoop, n)
                                                     : make_schedule(kind, p, v, m, n);
  if (!schedule.ok()) return schedule.status();
  absl::StatusOr<SimulationReport> report = simulate_uniform(*schedule, o);
  if (!report.ok()) return report.status();

  const int layers_per_stage = o.num_layers / (p * v);
  std::printf("%s schedule%s: PP %d, %d model chunk%s per rank (%d layers, %d per virtual stage), %d microbatches\n",
              to_string(kind), o.forward_only ? " (forward only)" : "", p, v, v > 1 ? "s" : "", o.num_layers,
              layers_per_stage, m);
  std::printf(
      "costs per microbatch through one rank's layers: forward %g, backward %g (of which W %g); per transfer %g\n\n",
      o.forward_cost, o.backward_cost, o.weight_cost.value_or(o.backward_cost / 2),
      costs_for(*schedule, o).transfer_time());
  if (!o.quiet) {
    for (int r = 0; r < p; ++r) {
      std::vector<std::string> chunks;
      for (int c = 0; c < v; ++c) {
        const int stage = virtual_stage(schedule->placement, p, r, c);
        const int first = stage * layers_per_stage;
        chunks.push_back(
            absl::StrFormat("chunk %d = virtual stage %d = layers %d-%d", c, stage, first, first + layers_per_stage - 1));
      }
      const std::vector<Step>& steps = schedule->ranks[static_cast<size_t>(r)];
      std::printf("rank %d (%s): %zu steps\n", r, absl::StrJoin(chunks, ", ").c_str(), steps.size());
      for (size_t s = 0; s < steps.size(); ++s) std::printf("  %4zu  %s\n", s, to_string(steps[s]).c_str());
      std::printf("\n");
    }
  }
  std::printf("makespan %g, ideal (busiest rank's compute) %g\n", report->makespan, report->ideal);
  std::printf("bubble fraction (makespan - ideal) / ideal: %.4f   formula %s = %.4f\n", report->bubble_fraction,
              formula_text(kind, p, v, m).c_str(), expected_bubble_fraction(kind, p, v, m));
  std::printf("idle share of the makespan (mean over ranks): %.4f\n\n", report->idle_fraction);
  std::printf("rank  busy      idle      peak live (chunk, microbatch)  formula %s\n",
              o.forward_only ? "(forward only: none kept)" : peak_formula_text(kind).c_str());
  for (int r = 0; r < p; ++r) {
    const RankTimeline& t = report->ranks[static_cast<size_t>(r)];
    std::printf("%-4d  %-8g  %-8g  %-4d = %5.2f microbatches        %d\n", r, t.busy, t.idle, t.peak_live,
                static_cast<double>(t.peak_live) / v, o.forward_only ? 0 : expected_peak_live(kind, p, v, m, r, n));
  }
  if (!o.forward_only && v <= 2) {
    // Every training schedule of the layout under the same costs: bubble and memory side by side.
    std::printf("\nschedules of this layout (same costs; live = microbatches between F and the end of their "
                "backward, W waiting = split backwards whose W has not run):\n");
    std::printf("schedule     makespan  bubble   formula                     peak live per rank      W waiting per rank\n");
    const std::vector<ScheduleKind> kinds =
        v == 1 ? std::vector<ScheduleKind>{ScheduleKind::kOneFOneB, ScheduleKind::kZeroBubbleH1}
               : std::vector<ScheduleKind>{ScheduleKind::kInterleaved, ScheduleKind::kZeroBubbleV};
    for (ScheduleKind other : kinds) {
      absl::StatusOr<Schedule> candidate = make_schedule(other, p, v, m, n);
      if (!candidate.ok()) return candidate.status();
      absl::StatusOr<SimulationReport> simulated = simulate_uniform(*candidate, o);
      if (!simulated.ok()) return simulated.status();
      std::vector<std::string> live, waiting;
      for (int r = 0; r < p; ++r) {
        live.push_back(absl::StrCat(simulated->ranks[static_cast<size_t>(r)].peak_live));
        int deferred = 0, most = 0;
        for (const Step& step : candidate->ranks[static_cast<size_t>(r)]) {
          const Op op = step.instructions.front().op;
          if (op == Op::kBackwardInput) most = std::max(most, ++deferred);
          if (op == Op::kBackwardWeight) --deferred;
        }
        waiting.push_back(absl::StrCat(most));
      }
      std::printf("%-11s  %-8g  %.4f   %-26s  %-22s  %s\n", to_string(other), simulated->makespan,
                  simulated->bubble_fraction,
                  absl::StrFormat("%.4f %s", expected_bubble_fraction(other, p, v, m), formula_text(other, p, v, m))
                      .c_str(),
                  absl::StrJoin(live, " ").c_str(), absl::StrJoin(waiting, " ").c_str());
    }
  }
  if (!o.svg.empty()) {
    const std::string title = absl::StrFormat("%s%s, PP=%d, v=%d, m=%d: bubble %.4f (formula %.4f)", to_string(kind),
                                              o.forward_only ? " forward only" : "", p, v, m, report->bubble_fraction,
                                              expected_bubble_fraction(kind, p, v, m));
    std::ofstream out(o.svg);
    out << gantt_svg(*schedule, *report, {.title = title});
    if (!out.good()) return absl::InternalError(absl::StrCat("cannot write ", o.svg));
    std::printf("\nwrote %s\n", o.svg.c_str());
  }
  return absl::OkStatus();
}

}  // namespace
}  // namespace gpt::pipeline

int main(int argc, char** argv) {
  gpt::pipeline::Options o;
  CLI::App app{"Generate, simulate and draw a pipeline-parallel schedule", "pipeline_schedule"};
  // Sizes are decimal integers from 1 (an option left out keeps its default; a typed 0 or -1 is
  // refused, never read as "the default"); costs are checked by check_costs.
  const CLI::Validator size = gpt::decimal_integer(1, std::numeric_limits<int>::max());
  app.add_option("--pipeline-model-parallel-size", o.pipeline_size, "Pipeline-parallel size p (default 1)")
      ->transform(size);
  app.add_option("--num-layers-per-virtual-pipeline-stage", o.layers_per_virtual_stage,
                 "Layers per virtual stage (interleaved schedule); default none")
      ->transform(size);
  app.add_option("--num-layers", o.num_layers, "Transformer layers")->transform(size);
  app.add_option("--num-microbatches", o.microbatches,
                 "Microbatches per iteration (Megatron: global batch / (micro batch x DP))")
      ->transform(size);
  app.add_option("--schedule,--pipeline-schedule", o.schedule,
                 "1f1b, interleaved, afab, zb-h1 or zb-v (v = 2; default: interleaved when v > 1, else 1f1b)");
  app.add_option("--microbatch-group-size-per-virtual-pipeline-stage", o.microbatch_group,
                 "Interleaved schedule: microbatches each chunk runs in a row (Megatron's; default p)")
      ->transform(size);
  app.add_flag("--forward-only", o.forward_only, "Evaluation schedule: forwards only");
  app.add_option("--svg", o.svg, "Write a Gantt chart of the simulated schedule");
  app.add_option("--forward-cost", o.forward_cost,
                 "Forward time of one microbatch through one rank's layers, 0 to 1e12 (default 1)");
  app.add_option("--backward-cost", o.backward_cost,
                 "Backward time of one microbatch through one rank's layers, 0 to 1e12 (default 2)");
  app.add_option("--weight-cost", o.weight_cost,
                 "Of the backward, the weight-gradient pass (W of a split backward), from 0 to --backward-cost "
                 "(default half the backward)");
  app.add_option("--p2p-latency", o.p2p_latency, "Time per point-to-point transfer, 0 to 1e12 (default 0)");
  app.add_option("--p2p-bytes", o.p2p_bytes, "Bytes per transfer (one activation or gradient), 0 to 1e18 (default 0)");
  app.add_option("--p2p-bandwidth", o.p2p_bandwidth, "Bytes per time unit, 0 to 1e18 (0, the default: unlimited)");
  app.add_flag("--quiet", o.quiet, "Skip the per-rank instruction lists");
  app.add_flag("--bubble-table", o.bubble_table, "Print simulated bubbles against the formulas for a grid of layouts");
  app.add_option("--metrics-file", o.metrics_file,
                 "Compare the last measured pipeline timeline in a pretrain_gpt --metrics-file (written with "
                 "--timing-log-level 2) with its simulation; --svg draws the measured timeline");
  if (const std::optional<int> exit_status = gpt::parse_command_line(app, argc, argv)) return *exit_status;
  if (!o.bubble_table && o.metrics_file.empty() && (o.num_layers == 0 || o.microbatches == 0)) {
    std::fprintf(stderr, "error: --num-layers and --num-microbatches are required\n");
    return 1;
  }
  const absl::Status status = gpt::pipeline::run(o);
  if (!status.ok()) {
    std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
    return 1;
  }
  return 0;
}
