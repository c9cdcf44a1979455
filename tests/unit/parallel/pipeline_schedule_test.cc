// Pipeline schedules: every generator over a grid of layouts passes the checker and the simulator,
// the bubble and the activation memory match Megatron's formulas, the order follows Megatron's
// schedules, and broken schedules are caught as deadlocks or mismatched transfers.
#include <algorithm>
#include <string>
#include <vector>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/pipeline/gantt_svg.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/simulator.h"

namespace gpt::pipeline {
namespace {

using ::testing::HasSubstr;

struct Layout {
  ScheduleKind kind;
  int p, v, m;
  std::string name() const {
    return std::string(to_string(kind)) + " p=" + std::to_string(p) + " v=" + std::to_string(v) +
           " m=" + std::to_string(m);
  }
};

// p in 1..8, v in 1..4, m every multiple of p up to 32; each schedule kind where it applies.
std::vector<Layout> layout_grid() {
  std::vector<Layout> grid;
  for (int p = 1; p <= 8; ++p) {
    for (int v = 1; v <= 4; ++v) {
      if (v > 1 && p == 1) continue;
      for (int m = p; m <= 32; m += p) {
        grid.push_back({ScheduleKind::kAllForwardAllBackward, p, v, m});
        grid.push_back({v == 1 ? ScheduleKind::kOneFOneB : ScheduleKind::kInterleaved, p, v, m});
      }
    }
  }
  return grid;
}

Schedule make(ScheduleKind kind, int p, int v, int m) {
  absl::StatusOr<Schedule> schedule = make_schedule(kind, p, v, m);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return schedule.ok() ? *std::move(schedule) : Schedule{p, v, m, {}};
}

SimulationReport run(const Schedule& schedule, double forward = 1, double backward = 2) {
  absl::StatusOr<SimulationReport> report =
      simulate(schedule, Costs::uniform(schedule.pipeline_size, schedule.virtual_size, forward, backward));
  EXPECT_TRUE(report.ok()) << report.status();
  return report.ok() ? *std::move(report) : SimulationReport{};
}

// Rank r's compute instructions as "F0.3" / "B1.2" (chunk.microbatch).
std::vector<std::string> compute_order(const Schedule& schedule, int rank) {
  std::vector<std::string> order;
  for (const Step& step : schedule.ranks[static_cast<size_t>(rank)]) {
    const Instruction& i = step.instructions.front();
    if (is_compute_op(i.op)) order.push_back(to_string(i.op) + std::to_string(i.chunk) + "." + std::to_string(i.microbatch));
  }
  return order;
}

std::vector<std::string> split(const std::string& text) {
  std::vector<std::string> words;
  size_t start = 0;
  while (start < text.size()) {
    size_t end = text.find(' ', start);
    if (end == std::string::npos) end = text.size();
    if (end > start) words.push_back(text.substr(start, end - start));
    start = end + 1;
  }
  return words;
}

TEST(PipelineSchedule, EveryGeneratorPassesTheCheckerOverTheGrid) {
  int checked = 0;
  for (const Layout& layout : layout_grid()) {
    SCOPED_TRACE(layout.name());
    const Schedule schedule = make(layout.kind, layout.p, layout.v, layout.m);
    ASSERT_EQ(schedule.ranks.size(), static_cast<size_t>(layout.p));
    EXPECT_TRUE(verify_schedule(schedule).ok()) << verify_schedule(schedule);
    absl::StatusOr<Schedule> evaluation = make_forward_only_schedule(layout.p, layout.v, layout.m);
    ASSERT_TRUE(evaluation.ok()) << evaluation.status();
    EXPECT_TRUE(verify_schedule(*evaluation).ok()) << verify_schedule(*evaluation);
    ++checked;
  }
  // Two kinds for each (p, v, m): 32 layouts for p = 1, 4 x (16 + 10 + 8 + 6 + 5 + 4 + 4) for p > 1.
  EXPECT_EQ(checked, 2 * (32 + 4 * 53));
}

TEST(PipelineSchedule, UniformCostBubbleMatchesMegatronsFormula) {
  for (const Layout& layout : layout_grid()) {
    SCOPED_TRACE(layout.name());
    const SimulationReport report = run(make(layout.kind, layout.p, layout.v, layout.m));
    const double formula = static_cast<double>(layout.p - 1) / (layout.v * layout.m);
    EXPECT_NEAR(report.bubble_fraction, formula, 0.01);
    EXPECT_DOUBLE_EQ(formula, expected_bubble_fraction(layout.kind, layout.p, layout.v, layout.m));
    // Uniform costs: every rank computes the same and idles the bubble.
    for (const RankTimeline& rank : report.ranks) {
      EXPECT_NEAR(rank.busy, layout.m * 3.0, 1e-9);
      EXPECT_NEAR(rank.idle, report.makespan - rank.busy, 1e-9);
    }
  }
}

TEST(PipelineSchedule, BubbleIsExactForOneFOneBAndInterleaved) {
  // (p - 1) (t_f + t_b) / v of bubble on top of m (t_f + t_b) of work.
  const SimulationReport one = run(make(ScheduleKind::kOneFOneB, 4, 1, 8));
  EXPECT_DOUBLE_EQ(one.makespan, (8 + 3) * 3.0);
  EXPECT_DOUBLE_EQ(one.bubble_fraction, 3.0 / 8);
  const SimulationReport interleaved = run(make(ScheduleKind::kInterleaved, 4, 2, 8), 2, 4);
  EXPECT_DOUBLE_EQ(interleaved.makespan, 8 * 6.0 + 3 * 3.0);
  EXPECT_DOUBLE_EQ(interleaved.bubble_fraction, 3.0 / 16);
}

TEST(PipelineSchedule, PeakLiveMicrobatches) {
  for (const Layout& layout : layout_grid()) {
    SCOPED_TRACE(layout.name());
    const int p = layout.p, v = layout.v, m = layout.m;
    const SimulationReport report = run(make(layout.kind, p, v, m));
    for (int r = 0; r < p; ++r) {
      int expected = 0;
      switch (layout.kind) {
        case ScheduleKind::kAllForwardAllBackward: expected = m * v; break;
        case ScheduleKind::kOneFOneB: expected = std::min(p - r, m); break;
        // Megatron's warm-up (p - r - 1) * 2 + (v - 1) * p, plus the steady phase's forward.
        case ScheduleKind::kInterleaved: expected = std::min((p - r - 1) * 2 + (v - 1) * p + 1, m * v); break;
      }
      EXPECT_EQ(report.ranks[static_cast<size_t>(r)].peak_live, expected) << "rank " << r;
      EXPECT_EQ(expected_peak_live(layout.kind, p, v, m, r), expected) << "rank " << r;
    }
  }
  // Rank 0 of the interleaved p = 4, v = 2 schedule holds 11 chunk-microbatches: 5.5 microbatches'
  // worth, Megatron's p + (p - 1) / v, against 4 for 1F1B and m for AFAB.
  EXPECT_EQ(run(make(ScheduleKind::kInterleaved, 4, 2, 8)).ranks[0].peak_live, 11);
  EXPECT_EQ(run(make(ScheduleKind::kOneFOneB, 4, 1, 8)).ranks[0].peak_live, 4);
  EXPECT_EQ(run(make(ScheduleKind::kAllForwardAllBackward, 4, 1, 8)).ranks[0].peak_live, 8);
}

TEST(PipelineSchedule, OneFOneBFollowsMegatronsOrder) {
  const Schedule schedule = make(ScheduleKind::kOneFOneB, 4, 1, 6);
  // Warm-up of p - r - 1 forwards, then one forward and one backward, then the cool-down.
  EXPECT_EQ(compute_order(schedule, 0), split("F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1 F0.5 B0.2 B0.3 B0.4 B0.5"));
  EXPECT_EQ(compute_order(schedule, 2), split("F0.0 F0.1 B0.0 F0.2 B0.1 F0.3 B0.2 F0.4 B0.3 F0.5 B0.4 B0.5"));
  EXPECT_EQ(compute_order(schedule, 3), split("F0.0 B0.0 F0.1 B0.1 F0.2 B0.2 F0.3 B0.3 F0.4 B0.4 F0.5 B0.5"));
  // The steady phase batches the transfers like send_forward_recv_backward and
  // send_backward_recv_forward: rank 1 after F0.3 sends it and receives the gradient of 0 together.
  const std::vector<Step>& rank1 = schedule.ranks[1];
  const auto batched = std::find_if(rank1.begin(), rank1.end(), [](const Step& s) { return s.instructions.size() == 2; });
  ASSERT_NE(batched, rank1.end());
  EXPECT_EQ(to_string(*batched), "send-activation c0 mb2 -> rank 2 + receive-gradient c0 mb0 <- rank 2");
  EXPECT_EQ(to_string(*(batched + 2)), "receive-activation c0 mb3 <- rank 0 + send-gradient c0 mb0 -> rank 0");
}

TEST(PipelineSchedule, InterleavedFollowsMegatronsOrder) {
  // p = 2, v = 2, m = 4: microbatches in groups of p; the k-th forward runs chunk (k / p) % v.
  // Rank 0 warms up with (p - 1) * 2 + (v - 1) * p = 4 forwards, rank 1 with 2.
  const Schedule schedule = make(ScheduleKind::kInterleaved, 2, 2, 4);
  EXPECT_EQ(compute_order(schedule, 0),
            split("F0.0 F0.1 F1.0 F1.1 F0.2 B1.0 F0.3 B1.1 F1.2 B0.0 F1.3 B0.1 B1.2 B1.3 B0.2 B0.3"));
  EXPECT_EQ(compute_order(schedule, 1),
            split("F0.0 F0.1 F1.0 B1.0 F1.1 B1.1 F0.2 B0.0 F0.3 B0.1 F1.2 B1.2 F1.3 B1.3 B0.2 B0.3"));
  // p = 4, v = 3, m = 8: rank 0's forward order is Megatron's schedule table.
  const std::vector<std::string> rank0 = compute_order(make(ScheduleKind::kInterleaved, 4, 3, 8), 0);
  std::vector<std::string> forwards;
  for (const std::string& c : rank0) {
    if (c[0] == 'F') forwards.push_back(c);
  }
  EXPECT_EQ(forwards, split("F0.0 F0.1 F0.2 F0.3 F1.0 F1.1 F1.2 F1.3 F2.0 F2.1 F2.2 F2.3 "
                            "F0.4 F0.5 F0.6 F0.7 F1.4 F1.5 F1.6 F1.7 F2.4 F2.5 F2.6 F2.7"));
}

TEST(PipelineSchedule, InterleavedMicrobatchGroupsFollowMegatron) {
  // Megatron's ModelParallelConfig example: PP2, VP2, groups of 3 of 5 microbatches run
  // "0 1 2 0 1 2 3 4 3 4" (chunk 0 of the group, then chunk 1); rank r warms up with
  // (p - r - 1) * 2 + (v - 1) * 3 forwards.
  const Schedule schedule = *make_schedule(ScheduleKind::kInterleaved, 2, 2, 5, 3);
  EXPECT_EQ(compute_order(schedule, 0), split("F0.0 F0.1 F0.2 F1.0 F1.1 F1.2 B1.0 F0.3 B1.1 F0.4 B1.2 F1.3 B0.0 F1.4 "
                                              "B0.1 B0.2 B1.3 B1.4 B0.3 B0.4"));
  EXPECT_EQ(compute_order(schedule, 1), split("F0.0 F0.1 F0.2 F1.0 B1.0 F1.1 B1.1 F1.2 B1.2 F0.3 B0.0 F0.4 B0.1 F1.3 "
                                              "B0.2 F1.4 B1.3 B1.4 B0.3 B0.4"));
  // A group of p is the default order.
  for (int rank = 0; rank < 4; ++rank) {
    EXPECT_EQ(compute_order(*make_schedule(ScheduleKind::kInterleaved, 4, 3, 8, 4), rank),
              compute_order(make(ScheduleKind::kInterleaved, 4, 3, 8), rank));
  }
  // Every group Megatron accepts, p in 2..5, v in 2..3, m up to 12: the transfers match, nothing
  // deadlocks, and the activation memory is the warm-up's (p - r - 1) * 2 + (v - 1) * n + 1.
  int layouts = 0;
  for (int p = 2; p <= 5; ++p) {
    for (int v = 2; v <= 3; ++v) {
      for (int m = p; m <= 12; ++m) {
        for (int n = p; n <= m; ++n) {
          if (m % n != 0 && m % n < p) {
            EXPECT_FALSE(make_schedule(ScheduleKind::kInterleaved, p, v, m, n).ok());
            continue;
          }
          SCOPED_TRACE("p=" + std::to_string(p) + " v=" + std::to_string(v) + " m=" + std::to_string(m) +
                       " n=" + std::to_string(n));
          absl::StatusOr<Schedule> made = make_schedule(ScheduleKind::kInterleaved, p, v, m, n);
          ASSERT_TRUE(made.ok()) << made.status();
          const SimulationReport report = run(*made);
          for (int r = 0; r < p; ++r) {
            EXPECT_EQ(report.ranks[static_cast<size_t>(r)].peak_live,
                      expected_peak_live(ScheduleKind::kInterleaved, p, v, m, r, n));
          }
          absl::StatusOr<Schedule> evaluation = make_forward_only_schedule(p, v, m, Placement::kLoop, n);
          ASSERT_TRUE(evaluation.ok()) << evaluation.status();
          EXPECT_TRUE(verify_schedule(*evaluation).ok()) << verify_schedule(*evaluation);
          ++layouts;
        }
      }
    }
  }
  EXPECT_GT(layouts, 150);
  // Megatron's refusals: outside [p, m], a last group of fewer than p.
  EXPECT_THAT(std::string(make_schedule(ScheduleKind::kInterleaved, 4, 2, 10, 3).status().message()),
              HasSubstr("must range in [--pipeline-model-parallel-size (4), the number of microbatches (10"));
  EXPECT_THAT(std::string(make_schedule(ScheduleKind::kInterleaved, 4, 2, 8, 9).status().message()),
              HasSubstr("must range in"));
  EXPECT_THAT(std::string(make_schedule(ScheduleKind::kInterleaved, 4, 2, 11, 5).status().message()),
              HasSubstr("must be 0 or at least --pipeline-model-parallel-size (4), but it is 1"));
  EXPECT_FALSE(make_schedule(ScheduleKind::kInterleaved, 4, 2, 8, -1).ok());
}

TEST(PipelineSchedule, TransfersOnlyWherePipelined) {
  for (ScheduleKind kind : {ScheduleKind::kAllForwardAllBackward, ScheduleKind::kOneFOneB}) {
    const Schedule schedule = make(kind, 1, 1, 5);
    for (const Step& step : schedule.ranks[0]) {
      ASSERT_EQ(step.instructions.size(), 1u);
      EXPECT_TRUE(is_compute_op(step.instructions[0].op));
    }
    EXPECT_EQ(schedule.ranks[0].size(), 10u);
  }
  // The first virtual stage receives no activation and the last sends none.
  const Schedule schedule = make(ScheduleKind::kInterleaved, 4, 2, 4);
  for (const Step& step : schedule.ranks[0]) {
    for (const Instruction& i : step.instructions) {
      EXPECT_FALSE(i.op == Op::kReceiveActivation && i.chunk == 0) << to_string(i);
      EXPECT_FALSE(i.op == Op::kSendGradient && i.chunk == 0) << to_string(i);
    }
  }
  for (const Step& step : schedule.ranks[3]) {
    for (const Instruction& i : step.instructions) {
      EXPECT_FALSE(i.op == Op::kSendActivation && i.chunk == 1) << to_string(i);
      EXPECT_FALSE(i.op == Op::kReceiveGradient && i.chunk == 1) << to_string(i);
    }
  }
}

TEST(PipelineSchedule, ForwardOnlyRunsEveryForwardAndNoBackward) {
  absl::StatusOr<Schedule> schedule = make_forward_only_schedule(4, 2, 8);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  for (const std::vector<Step>& steps : schedule->ranks) {
    int forwards = 0;
    for (const Step& step : steps) {
      for (const Instruction& i : step.instructions) {
        EXPECT_NE(i.op, Op::kBackward);
        EXPECT_FALSE(is_gradient_op(i.op));
        forwards += i.op == Op::kForward;
      }
    }
    EXPECT_EQ(forwards, 16);
  }
  const SimulationReport report = run(*schedule);
  EXPECT_EQ(report.ranks[0].peak_live, 0);  // nothing waits for a backward
  // Forward-only bubble: (p - 1) chunk forwards on top of m v of them.
  EXPECT_NEAR(report.makespan, (16 + 3) * 0.5, 1e-12);
}

TEST(PipelineSimulator, CostsAndTransferTimesByHand) {
  // 1F1B, p = 2, m = 2, forward 1, backward 2, each transfer 0.5:
  //   rank 0: F0 [0,1], send 0 [1,1.5], F1 [1.5,2.5], {send 1, recv grad 0} [2.5,5], B0 [5,7],
  //           recv grad 1 [7,8.5], B1 [8.5,10.5]
  //   rank 1: recv 0 [0,1.5], F0 [1.5,2.5], B0 [2.5,4.5], {send grad 0, recv 1} [4.5,5], F1 [5,6],
  //           B1 [6,8], send grad 1 [8,8.5]
  Schedule schedule = make(ScheduleKind::kOneFOneB, 2, 1, 2);
  Costs costs = Costs::uniform(2, 1, 1, 2);
  costs.p2p_latency = 0.25;
  costs.p2p_bytes = 1000;
  costs.p2p_bandwidth = 4000;
  absl::StatusOr<SimulationReport> report = simulate(schedule, costs);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_DOUBLE_EQ(report->makespan, 10.5);
  EXPECT_DOUBLE_EQ(report->ranks[0].compute[2].start, 5);
  EXPECT_DOUBLE_EQ(report->ranks[1].compute[2].start, 5);
  EXPECT_DOUBLE_EQ(report->ranks[1].finish, 8.5);
  EXPECT_DOUBLE_EQ(report->ideal, 6);
  EXPECT_DOUBLE_EQ(report->bubble_fraction, 4.5 / 6);
  EXPECT_DOUBLE_EQ(report->ranks[1].idle, 4.5);
  EXPECT_DOUBLE_EQ(report->idle_fraction, 4.5 / 10.5);

  // Per-rank, per-chunk costs: a rank twice as slow sets the pace; the ideal is its compute.
  Costs slow = Costs::uniform(4, 2, 1, 2);
  for (double& t : slow.forward[2]) t *= 2;
  for (double& t : slow.backward[2]) t *= 2;
  absl::StatusOr<SimulationReport> slowed = simulate(make(ScheduleKind::kInterleaved, 4, 2, 8), slow);
  ASSERT_TRUE(slowed.ok()) << slowed.status();
  EXPECT_DOUBLE_EQ(slowed->ideal, 8 * 6.0);
  EXPECT_DOUBLE_EQ(slowed->ranks[2].busy, 8 * 6.0);
  EXPECT_DOUBLE_EQ(slowed->ranks[0].busy, 8 * 3.0);
  EXPECT_GT(slowed->makespan, 8 * 6.0);
}

TEST(PipelineSimulator, RejectsBadCosts) {
  absl::StatusOr<SimulationReport> report = simulate(make(ScheduleKind::kOneFOneB, 2, 1, 2), Costs::uniform(3, 1, 1, 2));
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(report.status().message(), HasSubstr("costs must be sized [2][1]"));
}

// Index of rank r's first step that holds `wanted`.
size_t find_step(const Schedule& schedule, int rank, const Instruction& wanted) {
  const std::vector<Step>& steps = schedule.ranks[static_cast<size_t>(rank)];
  for (size_t s = 0; s < steps.size(); ++s) {
    for (const Instruction& i : steps[s].instructions) {
      if (i == wanted) return s;
    }
  }
  ADD_FAILURE() << "no " << to_string(wanted) << " on rank " << rank;
  return 0;
}

void erase_instruction(Schedule& schedule, int rank, const Instruction& wanted) {
  std::vector<Step>& steps = schedule.ranks[static_cast<size_t>(rank)];
  Step& step = steps[find_step(schedule, rank, wanted)];
  std::erase(step.instructions, wanted);
  std::erase_if(steps, [](const Step& s) { return s.instructions.empty(); });
}

TEST(PipelineSimulator, DroppedReceiveIsAMismatch) {
  // Rank 1 forgets to receive microbatch 2: rank 0's send of 2 meets the receive of 3.
  Schedule schedule = make(ScheduleKind::kOneFOneB, 4, 1, 8);
  erase_instruction(schedule, 1, {Op::kReceiveActivation, 0, 2, 0});
  absl::StatusOr<SimulationReport> report = simulate(schedule, Costs::uniform(4, 1, 1, 2));
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(report.status().message(), HasSubstr("mismatched transfer: message 2 from rank 0 to rank 1"));
  EXPECT_THAT(report.status().message(),
              HasSubstr("sends the activation of microbatch 2 for chunk 0 but rank 1 step"));
  EXPECT_THAT(report.status().message(), HasSubstr("expects the activation of microbatch 3 for chunk 0"));
  EXPECT_THAT(std::string(check_schedule(schedule).message()), HasSubstr("rank 1 has 0 activation receive(s) of chunk 0 microbatch 2, expected 1"));
}

TEST(PipelineSimulator, DroppedLastReceiveIsADeadlock) {
  // Nothing follows the last gradient receive, so rank 2's send waits forever.
  Schedule schedule = make(ScheduleKind::kInterleaved, 4, 2, 8);
  erase_instruction(schedule, 1, {Op::kReceiveGradient, 0, 7, 2});
  absl::StatusOr<SimulationReport> report = simulate(schedule, Costs::uniform(4, 2, 1, 2));
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  EXPECT_THAT(report.status().message(), HasSubstr("deadlock: rank 2 waits at step"));
  EXPECT_THAT(report.status().message(),
              HasSubstr("send-gradient c0 mb7 -> rank 1 has no matching receive (rank 1 "));
}

// Splits the batch holding `wanted` into one step per transfer, receives first: what an executor
// posting blocking transfers one at a time would do.
void unbatch_receives_first(Schedule& schedule, int rank, const Instruction& wanted) {
  std::vector<Step>& steps = schedule.ranks[static_cast<size_t>(rank)];
  const auto batch = steps.begin() + static_cast<std::ptrdiff_t>(find_step(schedule, rank, wanted));
  std::vector<Instruction> transfers = batch->instructions;
  std::stable_partition(transfers.begin(), transfers.end(), [](const Instruction& i) { return !is_send_op(i.op); });
  auto at = steps.erase(batch);
  for (const Instruction& i : transfers) at = steps.insert(at, Step{{i}}) + 1;
}

TEST(PipelineSimulator, SwappedOrderIsADeadlock) {
  // Rank 1 sends activation 2 and receives gradient 0 in one batch, and rank 2 sends gradient 0
  // and receives activation 2 in the mirror batch. Posted one by one, receive first, each waits for
  // the other's send.
  Schedule schedule = make(ScheduleKind::kOneFOneB, 4, 1, 8);
  EXPECT_EQ(to_string(schedule.ranks[1][find_step(schedule, 1, {Op::kReceiveGradient, 0, 0, 2})]),
            "send-activation c0 mb2 -> rank 2 + receive-gradient c0 mb0 <- rank 2");
  EXPECT_EQ(to_string(schedule.ranks[2][find_step(schedule, 2, {Op::kSendGradient, 0, 0, 1})]),
            "receive-activation c0 mb2 <- rank 1 + send-gradient c0 mb0 -> rank 1");
  unbatch_receives_first(schedule, 1, {Op::kReceiveGradient, 0, 0, 2});
  EXPECT_TRUE(verify_schedule(schedule).ok()) << "one side alone still completes: the other's batch takes both";
  unbatch_receives_first(schedule, 2, {Op::kSendGradient, 0, 0, 1});
  EXPECT_TRUE(check_schedule(schedule).ok()) << "each rank's own order is still valid";
  absl::StatusOr<SimulationReport> report = simulate(schedule, Costs::uniform(4, 1, 1, 2));
  EXPECT_EQ(report.status().code(), absl::StatusCode::kFailedPrecondition);
  const std::string message(report.status().message());
  EXPECT_THAT(message, HasSubstr("deadlock: "));
  EXPECT_THAT(message, HasSubstr("rank 1 waits at step 8: receive-gradient c0 mb0 <- rank 2 has no matching send "
                                 "(rank 2 waits at step 7: receive-activation c0 mb2 <- rank 1)"));
  EXPECT_THAT(message, HasSubstr("rank 2 waits at step 7: receive-activation c0 mb2 <- rank 1 has no matching send "
                                 "(rank 1 waits at step 8: receive-gradient c0 mb0 <- rank 2)"));
}

TEST(PipelineSimulator, SwappedTransfersInABatchAreAMismatch) {
  // With p = 2 both directions of the ring join the same two ranks, so a batch may send an
  // activation and a gradient to the same peer; listing them in the other order swaps the tensors.
  Schedule schedule = make(ScheduleKind::kInterleaved, 2, 2, 4);
  bool swapped = false;
  for (Step& step : schedule.ranks[0]) {
    int sends = 0;
    for (const Instruction& i : step.instructions) sends += is_send_op(i.op);
    if (sends == 2 && !swapped) {
      std::stable_partition(step.instructions.begin(), step.instructions.end(),
                            [](const Instruction& i) { return i.op == Op::kSendGradient; });
      swapped = true;
    }
  }
  ASSERT_TRUE(swapped);
  absl::StatusOr<SimulationReport> report = simulate(schedule, Costs::uniform(2, 2, 1, 2));
  EXPECT_EQ(report.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(report.status().message(), HasSubstr("mismatched transfer"));
  EXPECT_THAT(report.status().message(), HasSubstr("sends the gradient of microbatch"));
}

TEST(PipelineSimulator, WrongMicrobatchChunkOrPeerIsReported) {
  Schedule schedule = make(ScheduleKind::kOneFOneB, 3, 1, 3);
  Step& step = schedule.ranks[2][find_step(schedule, 2, {Op::kReceiveActivation, 0, 1, 1})];
  step.instructions[0].microbatch = 2;
  EXPECT_THAT(std::string(simulate(schedule, Costs::uniform(3, 1, 1, 2)).status().message()),
              HasSubstr("sends the activation of microbatch 1 for chunk 0 but rank 2 step"));

  schedule = make(ScheduleKind::kOneFOneB, 3, 1, 3);
  schedule.ranks[0][find_step(schedule, 0, {Op::kSendActivation, 0, 0, 1})].instructions[0].peer = 2;
  absl::Status status = simulate(schedule, Costs::uniform(3, 1, 1, 2)).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(status.message()),
              HasSubstr("invalid instruction: rank 0 step 1 (send-activation c0 mb0 -> rank 2): virtual stage 1 is on rank 1"));

  schedule = make(ScheduleKind::kInterleaved, 2, 2, 2);
  schedule.ranks[1][0].instructions[0].chunk = 2;
  EXPECT_THAT(std::string(simulate(schedule, Costs::uniform(2, 2, 1, 2)).status().message()),
              HasSubstr("chunk out of 0..1"));

  // One rank with two chunks would send to itself.
  schedule = Schedule{1, 2, 1, {{Step{{{Op::kForward, 0, 0, -1}}}, Step{{{Op::kSendActivation, 0, 0, 0}}}}}};
  EXPECT_THAT(std::string(check_schedule(schedule).message()), HasSubstr("a transfer to its own rank"));

  schedule = make(ScheduleKind::kOneFOneB, 2, 1, 2);
  schedule.ranks[0][0].instructions.push_back({Op::kForward, 0, 1, -1});
  EXPECT_THAT(std::string(check_schedule(schedule).message()), HasSubstr("mixes compute with other instructions"));
}

TEST(PipelineSimulator, CheckerCatchesOrderAndCountErrors) {
  // A backward before its forward.
  Schedule schedule = make(ScheduleKind::kOneFOneB, 1, 1, 2);
  std::swap(schedule.ranks[0][0], schedule.ranks[0][1]);
  EXPECT_THAT(std::string(check_schedule(schedule).message()),
              HasSubstr("rank 0 runs the forward of chunk 0 microbatch 0 (step 1) after its backward (step 0)"));
  // A forward run twice.
  schedule = make(ScheduleKind::kAllForwardAllBackward, 1, 1, 2);
  schedule.ranks[0].push_back(schedule.ranks[0][0]);
  EXPECT_THAT(std::string(check_schedule(schedule).message()), HasSubstr("rank 0 has 2 forward(s) of chunk 0 microbatch 0"));
  // A send before the forward that computes it.
  schedule = make(ScheduleKind::kAllForwardAllBackward, 2, 1, 2);
  std::swap(schedule.ranks[0][0], schedule.ranks[0][1]);
  EXPECT_THAT(std::string(check_schedule(schedule).message()),
              HasSubstr("runs the forward of chunk 0 microbatch 0 (step 1) after its activation send (step 0)"));
}

TEST(PipelineSimulator, TimelineCheckerCatchesAStageStartingEarly) {
  const Schedule schedule = make(ScheduleKind::kOneFOneB, 2, 1, 2);
  SimulationReport report = run(schedule);
  ASSERT_TRUE(check_timeline(schedule, report).ok());
  report.ranks[1].compute[0].start = 0.5;  // rank 1's F0 before rank 0's F0 ends at 1
  EXPECT_THAT(std::string(check_timeline(schedule, report).message()),
              HasSubstr("forward of virtual stage 1 microbatch 0 starts at 0.5 before F c0 mb0 ends at 1"));
}

// ZB-H1 (split backward): p in {2, 3, 4, 8}, m in {p, 2p, 4p}.
std::vector<Layout> zero_bubble_grid() {
  std::vector<Layout> grid;
  for (int p : {2, 3, 4, 8}) {
    for (int m : {p, 2 * p, 4 * p}) grid.push_back({ScheduleKind::kZeroBubbleH1, p, 1, m});
  }
  return grid;
}

TEST(ZeroBubbleSchedule, PassesTheCheckerAndTheSimulator) {
  for (const Layout& layout : zero_bubble_grid()) {
    SCOPED_TRACE(layout.name());
    const Schedule schedule = make(layout.kind, layout.p, layout.v, layout.m);
    ASSERT_EQ(schedule.ranks.size(), static_cast<size_t>(layout.p));
    EXPECT_TRUE(verify_schedule(schedule).ok()) << verify_schedule(schedule);
    // Every microbatch's backward is split on all but the first stage, which fuses it (it sends
    // no gradient).
    for (int r = 0; r < layout.p; ++r) {
      int fused = 0, input = 0, weight = 0;
      for (const std::string& c : compute_order(schedule, r)) {
        fused += c.rfind("B0.", 0) == 0;
        input += c.rfind("Bi0.", 0) == 0;
        weight += c.rfind("W0.", 0) == 0;
      }
      EXPECT_EQ(fused, r == 0 ? layout.m : 0);
      EXPECT_EQ(input, r == 0 ? 0 : layout.m);
      EXPECT_EQ(weight, r == 0 ? 0 : layout.m);
    }
  }
}

TEST(ZeroBubbleSchedule, BubbleIsAThirdOfOneFOneBsWithEqualPasses) {
  // F = B = W = 1 (the fused backward costs 2): Qi et al.'s ZB-H1 bubble (p - 1)(T_F + T_B - T_W)
  // = p - 1 against 1F1B's (p - 1)(T_F + T_B + T_W) = 3 (p - 1), on 3 m of work per rank.
  for (const Layout& layout : zero_bubble_grid()) {
    SCOPED_TRACE(layout.name());
    const SimulationReport zb = run(make(layout.kind, layout.p, 1, layout.m));
    const SimulationReport one_f_one_b = run(make(ScheduleKind::kOneFOneB, layout.p, 1, layout.m));
    const double paper = static_cast<double>(layout.p - 1) / (3.0 * layout.m);
    EXPECT_NEAR(zb.bubble_fraction, paper, 1e-9);
    EXPECT_DOUBLE_EQ(paper, expected_bubble_fraction(layout.kind, layout.p, 1, layout.m));
    EXPECT_NEAR(zb.bubble_fraction * 3, one_f_one_b.bubble_fraction, 1e-9);
    for (const RankTimeline& rank : zb.ranks) EXPECT_NEAR(rank.busy, layout.m * 3.0, 1e-9);
  }
}

TEST(ZeroBubbleSchedule, PeakLiveIsOneFOneBsMost) {
  for (const Layout& layout : zero_bubble_grid()) {
    SCOPED_TRACE(layout.name());
    const Schedule schedule = make(layout.kind, layout.p, 1, layout.m);
    const SimulationReport report = run(schedule);
    int one_f_one_b_most = 0;
    for (int r = 0; r < layout.p; ++r) {
      one_f_one_b_most = std::max(one_f_one_b_most, expected_peak_live(ScheduleKind::kOneFOneB, layout.p, 1, layout.m, r));
    }
    for (int r = 0; r < layout.p; ++r) {
      EXPECT_EQ(report.ranks[static_cast<size_t>(r)].peak_live, expected_peak_live(layout.kind, layout.p, 1, layout.m, r));
      EXPECT_LE(report.ranks[static_cast<size_t>(r)].peak_live, one_f_one_b_most);
    }
  }
}

TEST(ZeroBubbleSchedule, FollowsTheHandcraftedOrder) {
  const Schedule schedule = make(ScheduleKind::kZeroBubbleH1, 4, 1, 8);
  EXPECT_EQ(compute_order(schedule, 0),
            split("F0.0 F0.1 F0.2 F0.3 B0.0 F0.4 B0.1 F0.5 B0.2 F0.6 B0.3 F0.7 B0.4 B0.5 B0.6 B0.7"));
  EXPECT_EQ(compute_order(schedule, 3),
            split("F0.0 Bi0.0 F0.1 Bi0.1 F0.2 Bi0.2 F0.3 Bi0.3 W0.0 F0.4 Bi0.4 W0.1 F0.5 Bi0.5 W0.2 F0.6 Bi0.6 W0.3 "
                  "F0.7 Bi0.7 W0.4 W0.5 W0.6 W0.7"));
}

TEST(ZeroBubbleSchedule, FewerMicrobatchesThanStagesStillRun) {
  for (int p : {2, 4, 8}) {
    for (int m = 1; m < p; ++m) {
      SCOPED_TRACE(testing::Message() << "p=" << p << " m=" << m);
      const Schedule schedule = make(ScheduleKind::kZeroBubbleH1, p, 1, m);
      EXPECT_TRUE(verify_schedule(schedule).ok()) << verify_schedule(schedule);
    }
  }
}

TEST(ZeroBubbleSchedule, UnevenCostsStayDeadlockFree) {
  // The transfers are keyed by the unit-cost timeline; other costs may make a rank wait for a
  // peer, never deadlock, and data still flows in order.
  const Schedule schedule = make(ScheduleKind::kZeroBubbleH1, 4, 1, 8);
  Costs costs = Costs::uniform(4, 1, 1.0, 3.0, 0.7);
  costs.forward[2][0] = 1.9;
  costs.transfer_time();
  costs.p2p_latency = 0.05;
  absl::StatusOr<SimulationReport> report = simulate(schedule, costs);
  ASSERT_TRUE(report.ok()) << report.status();
  EXPECT_TRUE(check_timeline(schedule, *report).ok()) << check_timeline(schedule, *report);
}

TEST(ZeroBubbleSchedule, CheckerCatchesSplitErrors) {
  Schedule schedule = make(ScheduleKind::kZeroBubbleH1, 2, 1, 2);
  // Rank 1's W passes swapped: out of B order.
  std::vector<Step>& rank = schedule.ranks[1];
  std::vector<size_t> weights;
  for (size_t n = 0; n < rank.size(); ++n) {
    if (rank[n].instructions.front().op == Op::kBackwardWeight) weights.push_back(n);
  }
  ASSERT_EQ(weights.size(), 2u);
  std::swap(rank[weights[0]], rank[weights[1]]);
  EXPECT_THAT(std::string(check_schedule(schedule).message()), HasSubstr("in the order of their B"));
  // A W dropped: its B has no W.
  std::swap(rank[weights[0]], rank[weights[1]]);
  rank.erase(rank.begin() + static_cast<std::ptrdiff_t>(weights[1]));
  EXPECT_THAT(std::string(check_schedule(schedule).message()), HasSubstr("weight-gradient pass"));
}

TEST(ZeroBubbleSchedule, LoweringRefusesBadOrders) {
  // The W before its B on the same rank can never run.
  std::vector<std::vector<Instruction>> orders = {
      {{Op::kForward, 0, 0, -1}, {Op::kBackward, 0, 0, -1}},
      {{Op::kForward, 0, 0, -1}, {Op::kBackwardWeight, 0, 0, -1}, {Op::kBackwardInput, 0, 0, -1}}};
  EXPECT_THAT(std::string(lower_compute_orders(2, 1, 1, orders).status().message()), HasSubstr("cannot run"));
  orders[1] = {{Op::kForward, 0, 0, -1}, {Op::kBackwardInput, 0, 0, -1}};
  EXPECT_THAT(std::string(lower_compute_orders(2, 1, 1, orders).status().message()), HasSubstr("miss the W"));
  EXPECT_THAT(std::string(make_schedule(ScheduleKind::kZeroBubbleH1, 2, 2, 2).status().message()),
              HasSubstr("--num-layers-per-virtual-pipeline-stage"));
}

// ZB-V: two chunks per rank in a V (rank r holds stages r and 2p - 1 - r).
TEST(ZeroBubbleV, PassesTheCheckerAndReachesTheLowerBound) {
  for (int p : {2, 3, 4, 8}) {
    for (int m : {p, 2 * p, 4 * p}) {
      SCOPED_TRACE(testing::Message() << "p=" << p << " m=" << m);
      const Schedule schedule = make(ScheduleKind::kZeroBubbleV, p, 2, m);
      ASSERT_EQ(schedule.placement, Placement::kV);
      EXPECT_TRUE(verify_schedule(schedule).ok()) << verify_schedule(schedule);
      // F = B = W = 1 per chunk (the rank's backward costs 2 per chunk pass pair): only the last
      // rank's wait for its first activation, p - 1 chunk forwards, is left of the bubble.
      const SimulationReport report = run(schedule);
      EXPECT_NEAR(report.bubble_fraction, static_cast<double>(p - 1) / (6.0 * m), 1e-9);
      EXPECT_DOUBLE_EQ(expected_bubble_fraction(ScheduleKind::kZeroBubbleV, p, 2, m),
                       static_cast<double>(p - 1) / (6.0 * m));
      const SimulationReport interleaved = run(make(ScheduleKind::kInterleaved, p, 2, m));
      EXPECT_LT(report.bubble_fraction, interleaved.bubble_fraction / 2);
      // At most p microbatches' activations (2p half-size pairs): 1F1B's most.
      for (int r = 0; r < p; ++r) {
        EXPECT_LE(report.ranks[static_cast<size_t>(r)].peak_live, expected_peak_live(ScheduleKind::kZeroBubbleV, p, 2, m, r));
        EXPECT_LE(report.ranks[static_cast<size_t>(r)].peak_live, 2 * p);
      }
    }
  }
}

TEST(ZeroBubbleV, TheTurnOfTheVTakesNoTransfer) {
  const Schedule schedule = make(ScheduleKind::kZeroBubbleV, 4, 2, 8);
  EXPECT_EQ(virtual_stage(Placement::kV, 4, 3, 0), 3);
  EXPECT_EQ(virtual_stage(Placement::kV, 4, 3, 1), 4);
  EXPECT_EQ(virtual_stage(Placement::kV, 4, 0, 1), 7);
  EXPECT_EQ(stage_location(Placement::kV, 4, 6).rank, 1);
  EXPECT_EQ(stage_location(Placement::kV, 4, 6).chunk, 1);
  for (int r = 0; r < 4; ++r) {
    for (const Step& step : schedule.ranks[static_cast<size_t>(r)]) {
      for (const Instruction& i : step.instructions) {
        if (is_compute_op(i.op)) continue;
        EXPECT_NE(i.peer, r) << to_string(i);
        // Rank 3 moves nothing between its chunks; rank 0's chunk 1 (the last stage) sends no
        // activation and its chunk 0 (the first) receives none.
        if (r == 3) EXPECT_FALSE(i.chunk == 0 && (i.op == Op::kSendActivation || i.op == Op::kReceiveGradient));
        if (r == 3) EXPECT_FALSE(i.chunk == 1 && (i.op == Op::kReceiveActivation || i.op == Op::kSendGradient));
        if (r == 0) EXPECT_FALSE(i.chunk == 1 && (i.op == Op::kSendActivation || i.op == Op::kReceiveGradient));
      }
    }
  }
  // A transfer between the two chunks of rank 3 is refused by the simulator's checks.
  Schedule broken = schedule;
  broken.ranks[3].insert(broken.ranks[3].begin(), Step{{Instruction{Op::kSendActivation, 0, 0, 2}}});
  EXPECT_THAT(std::string(check_schedule(broken).message()), HasSubstr("is on this rank"));
}

TEST(ZeroBubbleV, ForwardOnlyFollowsTheTrainingOrder) {
  // Evaluation under ZB-V: the training schedule's forwards, no gradient, no transfer at the turn.
  for (int p : {2, 3, 4}) {
    for (int m : {1, p, 2 * p + 1}) {
      SCOPED_TRACE(testing::Message() << "p=" << p << " m=" << m);
      absl::StatusOr<Schedule> evaluate = make_forward_only_schedule(p, 2, m, Placement::kV);
      ASSERT_TRUE(evaluate.ok()) << evaluate.status();
      EXPECT_EQ(evaluate->placement, Placement::kV);
      EXPECT_TRUE(verify_schedule(*evaluate).ok()) << verify_schedule(*evaluate);
      const Schedule train = make(ScheduleKind::kZeroBubbleV, p, 2, m);
      for (int r = 0; r < p; ++r) {
        std::vector<Instruction> forwards, evaluated;
        for (const Step& step : train.ranks[static_cast<size_t>(r)]) {
          if (step.instructions[0].op == Op::kForward) forwards.push_back(step.instructions[0]);
        }
        for (const Step& step : evaluate->ranks[static_cast<size_t>(r)]) {
          for (const Instruction& i : step.instructions) {
            EXPECT_FALSE(is_gradient_op(i.op) || is_backward_op(i.op) || i.op == Op::kBackwardWeight) << to_string(i);
            if (i.op == Op::kForward) evaluated.push_back(i);
          }
        }
        EXPECT_EQ(evaluated, forwards) << "rank " << r;
      }
    }
  }
  EXPECT_THAT(std::string(make_forward_only_schedule(4, 1, 8, Placement::kV).status().message()),
              HasSubstr("two model chunks per rank"));
}

TEST(ZeroBubbleV, RefusesOtherLayouts) {
  EXPECT_THAT(std::string(make_schedule(ScheduleKind::kZeroBubbleV, 4, 1, 8).status().message()),
              HasSubstr("two model chunks per rank"));
  EXPECT_THAT(std::string(make_schedule(ScheduleKind::kZeroBubbleV, 4, 3, 8).status().message()),
              HasSubstr("two model chunks per rank"));
  EXPECT_THAT(std::string(make_schedule(ScheduleKind::kZeroBubbleV, 1, 2, 8).status().message()),
              HasSubstr("--pipeline-model-parallel-size > 1"));
  // Any number of microbatches runs (no multiple of p needed).
  for (int m = 1; m <= 9; ++m) {
    SCOPED_TRACE(m);
    const Schedule schedule = make(ScheduleKind::kZeroBubbleV, 4, 2, m);
    EXPECT_TRUE(verify_schedule(schedule).ok()) << verify_schedule(schedule);
  }
}

TEST(PipelineLayout, BadLayoutsNameTheFlags) {
  EXPECT_TRUE(validate_pipeline_layout(8, 4, 0, 3).ok());
  EXPECT_TRUE(validate_pipeline_layout(8, 4, 1, 8).ok());
  EXPECT_TRUE(validate_pipeline_layout(8, 4, 2, 3).ok());  // one chunk per rank: no interleaving
  auto message = [](int layers, int p, int per_stage, int m) {
    return std::string(validate_pipeline_layout(layers, p, per_stage, m).message());
  };
  EXPECT_EQ(message(10, 4, 0, 4), "--num-layers (10) must be divisible by --pipeline-model-parallel-size (4)");
  EXPECT_EQ(message(12, 4, 2, 4),
            "--num-layers (12) must be divisible by --pipeline-model-parallel-size (4) x "
            "--num-layers-per-virtual-pipeline-stage (2)");
  EXPECT_EQ(message(4, 8, 0, 8),
            "--pipeline-model-parallel-size (8) exceeds --num-layers (4): every pipeline stage needs at least one layer");
  EXPECT_EQ(message(8, 1, 2, 4),
            "--num-layers-per-virtual-pipeline-stage (an interleaved schedule) needs --pipeline-model-parallel-size > 1");
  EXPECT_EQ(message(8, 4, 1, 6),
            "the interleaved schedule (--num-layers-per-virtual-pipeline-stage) needs the number of microbatches (6 = "
            "--global-batch-size / (--micro-batch-size x data-parallel size)) to be a multiple of "
            "--pipeline-model-parallel-size (4)");
  EXPECT_THAT(message(8, 0, 0, 4), HasSubstr("--pipeline-model-parallel-size must be at least 1"));
  EXPECT_THAT(message(8, 2, 0, 0), HasSubstr("--global-batch-size / (--micro-batch-size x data-parallel size)"));
  EXPECT_EQ(validate_pipeline_layout(10, 4, 0, 4).code(), absl::StatusCode::kInvalidArgument);

  EXPECT_EQ(*virtual_pipeline_size(8, 4, 1), 2);
  EXPECT_EQ(*virtual_pipeline_size(24, 4, 2), 3);
  EXPECT_EQ(*virtual_pipeline_size(8, 4, 0), 1);
  EXPECT_FALSE(virtual_pipeline_size(12, 4, 2).ok());
}

TEST(PipelineLayout, GeneratorsRefuseWhatMegatronRefuses) {
  EXPECT_THAT(std::string(make_schedule(ScheduleKind::kInterleaved, 4, 2, 6).status().message()),
              HasSubstr("to be a multiple of --pipeline-model-parallel-size (4)"));
  EXPECT_THAT(std::string(make_schedule(ScheduleKind::kInterleaved, 4, 1, 8).status().message()),
              HasSubstr("needs --num-layers-per-virtual-pipeline-stage"));
  EXPECT_THAT(std::string(make_schedule(ScheduleKind::kOneFOneB, 4, 2, 8).status().message()),
              HasSubstr("use the interleaved schedule"));
  EXPECT_FALSE(make_schedule(ScheduleKind::kAllForwardAllBackward, 1, 2, 4).ok());
  EXPECT_FALSE(make_forward_only_schedule(4, 2, 6).ok());
  // Without interleaving any m works, also m < p.
  EXPECT_TRUE(verify_schedule(make(ScheduleKind::kOneFOneB, 4, 1, 3)).ok());
  EXPECT_TRUE(verify_schedule(make(ScheduleKind::kOneFOneB, 5, 1, 7)).ok());

  EXPECT_EQ(*parse_schedule_kind("1f1b"), ScheduleKind::kOneFOneB);
  EXPECT_EQ(*parse_schedule_kind("interleaved"), ScheduleKind::kInterleaved);
  EXPECT_EQ(*parse_schedule_kind("afab"), ScheduleKind::kAllForwardAllBackward);
  EXPECT_THAT(std::string(parse_schedule_kind("zb").status().message()), HasSubstr("unknown pipeline schedule 'zb'"));
  EXPECT_EQ(default_schedule_kind(1), ScheduleKind::kOneFOneB);
  EXPECT_EQ(default_schedule_kind(2), ScheduleKind::kInterleaved);
}

TEST(PipelineGantt, OneRowPerRankAndOneLabelledBoxPerCompute) {
  const Schedule schedule = make(ScheduleKind::kInterleaved, 4, 2, 8);
  const SimulationReport report = run(schedule);
  const std::string svg = gantt_svg(schedule, report, {.title = "PP=4 <v=2>"});
  EXPECT_EQ(svg.rfind("<svg", 0), 0u);
  EXPECT_THAT(svg, HasSubstr("</svg>"));
  EXPECT_THAT(svg, HasSubstr("PP=4 &lt;v=2&gt;"));
  for (int r = 0; r < 4; ++r) EXPECT_THAT(svg, HasSubstr(">rank " + std::to_string(r) + "</text>"));
  size_t boxes = 0;
  for (size_t at = svg.find("<title>"); at != std::string::npos; at = svg.find("<title>", at + 1)) ++boxes;
  EXPECT_EQ(boxes, 4u * 2 * 8 * 2);
  EXPECT_THAT(svg, HasSubstr("<title>B c1 mb7: "));
  EXPECT_THAT(svg, HasSubstr(">c1</text>"));
  EXPECT_THAT(svg, HasSubstr("forward chunk 1"));
}

}  // namespace
}  // namespace gpt::pipeline
