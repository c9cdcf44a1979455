// The executor's stash accounting against the schedules' own bounds: with 1F1B each rank needs as
// many slots as Megatron's warm-up bound (p - r, at most m); with interleaving no chunk needs more
// than the rank's bound and together they hold at least its peak; evaluation needs one per chunk.
// (The executor's runs over a real pipeline group are checked by the layout-parity tests.)
#include <algorithm>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/simulator.h"

namespace gpt::pipeline {
namespace {

TEST(PipelineExecutor, StashSlotsMatchTheScheduleBounds) {
  for (int p : {1, 2, 3, 4, 8}) {
    for (int v : {1, 2, 3}) {
      if (v > 1 && p == 1) continue;
      for (int m : {p, 2 * p, 4 * p}) {
        const ScheduleKind kind = default_schedule_kind(v);
        absl::StatusOr<Schedule> train = make_schedule(kind, p, v, m);
        absl::StatusOr<Schedule> evaluate = make_forward_only_schedule(p, v, m);
        ASSERT_TRUE(train.ok()) << train.status();
        ASSERT_TRUE(evaluate.ok()) << evaluate.status();
        for (int r = 0; r < p; ++r) {
          SCOPED_TRACE(testing::Message() << "p=" << p << " v=" << v << " m=" << m << " rank " << r);
          const std::vector<int> slots = stash_slots(train->ranks[static_cast<size_t>(r)], v);
          const int bound = expected_peak_live(kind, p, v, m, r);
          int total = 0;
          for (int s : slots) {
            EXPECT_GE(s, 1);
            EXPECT_LE(s, bound);
            total += s;
          }
          if (v == 1) EXPECT_EQ(slots[0], bound);
          EXPECT_GE(total, bound);
          for (int s : stash_slots(evaluate->ranks[static_cast<size_t>(r)], v)) EXPECT_EQ(s, 1);
        }
      }
    }
  }
}

TEST(PipelineExecutor, ZeroBubbleSlotsAndLeaseDepths) {
  // A split backward holds its slot until its W: every rank of ZB-H1 needs min(p, m) slots, the
  // schedule's peak; the lease depth is the most W passes waiting, r + 1 on rank r > 0 (its r
  // deferred by the F-B iterations, plus the current one) and 0 on rank 0, which fuses.
  for (int p : {2, 3, 4, 8}) {
    for (int m : {p, 2 * p, 4 * p}) {
      absl::StatusOr<Schedule> train = make_schedule(ScheduleKind::kZeroBubbleH1, p, 1, m);
      ASSERT_TRUE(train.ok()) << train.status();
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE(testing::Message() << "p=" << p << " m=" << m << " rank " << r);
        const auto& steps = train->ranks[static_cast<size_t>(r)];
        EXPECT_EQ(stash_slots(steps, 1)[0], expected_peak_live(ScheduleKind::kZeroBubbleH1, p, 1, m, r));
        EXPECT_EQ(deferral_depths(steps, 1)[0], r == 0 ? 0 : std::min(r + 1, m));
      }
    }
  }
  // ZB-V: each chunk's slots cover its own most microbatches alive (the turn's rank takes chunk
  // 1's slot when chunk 0's forward hands the activation over), together at least the rank's
  // simulated peak, and evaluation needs no more than training.
  for (int p : {2, 3, 4}) {
    for (int m : {1, p, 2 * p, 4 * p}) {
      absl::StatusOr<Schedule> train = make_schedule(ScheduleKind::kZeroBubbleV, p, 2, m);
      absl::StatusOr<Schedule> evaluate = make_forward_only_schedule(p, 2, m, Placement::kV);
      ASSERT_TRUE(train.ok() && evaluate.ok());
      absl::StatusOr<SimulationReport> report = simulate(*train, Costs::uniform(p, 2, 1, 2));
      ASSERT_TRUE(report.ok()) << report.status();
      for (int r = 0; r < p; ++r) {
        SCOPED_TRACE(testing::Message() << "ZB-V p=" << p << " m=" << m << " rank " << r);
        const RankStages where{r, p, Placement::kV};
        const std::vector<int> slots = stash_slots(train->ranks[static_cast<size_t>(r)], 2, where);
        EXPECT_GE(slots[0] + slots[1], report->ranks[static_cast<size_t>(r)].peak_live);
        for (int s : slots) EXPECT_LE(s, std::min(m, 2 * p));
        const std::vector<int> evaluation = stash_slots(evaluate->ranks[static_cast<size_t>(r)], 2, where);
        for (int c = 0; c < 2; ++c) EXPECT_LE(evaluation[static_cast<size_t>(c)], slots[static_cast<size_t>(c)]);
        const std::vector<int> depths = deferral_depths(train->ranks[static_cast<size_t>(r)], 2);
        EXPECT_LE(depths[0], slots[0]);
        EXPECT_LE(depths[1], slots[1]);
        EXPECT_GE(depths[1], 1) << "chunk 1 never ends the pipeline's backward: its W waits";
      }
      // Without the turn's hand-off counted, rank p - 1's chunk 1 would be short of a slot
      // whenever its forward does not follow chunk 0's at once.
      const std::vector<int> turn = stash_slots(train->ranks[static_cast<size_t>(p - 1)], 2, {p - 1, p, Placement::kV});
      const std::vector<int> uncounted = stash_slots(train->ranks[static_cast<size_t>(p - 1)], 2);
      EXPECT_GE(turn[1], uncounted[1]);
    }
  }
  // Fused schedules defer nothing.
  absl::StatusOr<Schedule> interleaved = make_schedule(ScheduleKind::kInterleaved, 4, 2, 8);
  ASSERT_TRUE(interleaved.ok());
  for (const auto& steps : interleaved->ranks) EXPECT_EQ(deferral_depths(steps, 2), (std::vector<int>{0, 0}));
}

}  // namespace
}  // namespace gpt::pipeline
