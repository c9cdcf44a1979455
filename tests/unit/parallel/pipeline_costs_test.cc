// Issue 44: the simulator takes only costs it can make sense of. A NaN would make every comparison
// of schedules false (--pipeline-schedule auto then chose on it), an infinity or 1e308 costs that add
// up past the largest double a makespan of inf, and a weight-gradient cost above the backward it is
// part of a negative B: each is refused with a message naming the cost, never simulated.
#include <cmath>
#include <limits>

#include "gmock/gmock.h"
#include "gtest/gtest.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/simulator.h"

namespace gpt::pipeline {
namespace {

using ::testing::HasSubstr;

Schedule one_f_one_b(int p, int m) {
  absl::StatusOr<Schedule> schedule = make_schedule(ScheduleKind::kOneFOneB, p, 1, m);
  EXPECT_TRUE(schedule.ok()) << schedule.status();
  return *std::move(schedule);
}

absl::Status simulated(const Costs& costs) { return simulate(one_f_one_b(2, 4), costs).status(); }

TEST(PipelineCosts, FiniteUniformCostsSimulate) {
  absl::StatusOr<SimulationReport> report = simulate(one_f_one_b(2, 4), Costs::uniform(2, 1, 1, 2, 2));
  ASSERT_TRUE(report.ok()) << report.status();
  // W equal to the whole backward is allowed (B then costs 0): 1F1B, p 2, m 4: (m + p - 1) (F + B).
  EXPECT_DOUBLE_EQ(report->makespan, 15.0);
}

TEST(PipelineCosts, NonFiniteOrNegativeCostsAreRefused) {
  const double nan = std::numeric_limits<double>::quiet_NaN(), inf = std::numeric_limits<double>::infinity();
  for (const auto& [forward, backward, what] :
       {std::tuple{nan, 2.0, "the forward cost of rank 0 chunk 0 must be at least 0 (got nan)"},
        std::tuple{inf, 2.0, "the forward cost of rank 0 chunk 0 must be at least 0 (got inf)"},
        std::tuple{-1.0, 2.0, "the forward cost of rank 0 chunk 0 must be at least 0 (got -1)"},
        std::tuple{1.0, nan, "the backward cost of rank 0 chunk 0"},
        std::tuple{1.0, -inf, "the backward cost of rank 0 chunk 0"}}) {
    const absl::Status status = simulated(Costs::uniform(2, 1, forward, backward));
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << what;
    EXPECT_THAT(status.message(), HasSubstr(what));
  }
}

TEST(PipelineCosts, OneBadStageIsNamed) {
  Costs costs = Costs::uniform(2, 1, 1, 2);
  costs.weight[1][0] = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(simulated(costs).message(), HasSubstr("the weight-gradient cost of rank 1 chunk 0 must be at least 0"));
}

TEST(PipelineCosts, WeightGradientAboveItsBackwardIsRefused) {
  Costs costs = Costs::uniform(2, 1, 1, 2);
  costs.weight[0][0] = 2.5;
  const absl::Status status = simulated(costs);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(),
              HasSubstr("the weight-gradient cost of rank 0 chunk 0 (2.5) is more than the backward it is part of (2)"));
}

TEST(PipelineCosts, SumsThatOverflowAreRefused) {
  // Each cost finite, their sum over the microbatches not.
  const absl::Status status = simulated(Costs::uniform(2, 1, 1e308, 1e308));
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(status.message(), HasSubstr("overflows"));
}

TEST(PipelineCosts, BadTransferTimesAreRefused) {
  Costs costs = Costs::uniform(2, 1, 1, 2);
  costs.p2p_latency = std::numeric_limits<double>::quiet_NaN();
  EXPECT_THAT(simulated(costs).message(), HasSubstr("the transfer time"));
  costs.p2p_latency = 0;
  costs.p2p_bytes = 1e300;
  costs.p2p_bandwidth = 1e-300;  // inf
  EXPECT_THAT(simulated(costs).message(), HasSubstr("is not a finite time"));
  costs.p2p_bytes = 1;
  costs.p2p_bandwidth = -1;
  EXPECT_THAT(simulated(costs).message(), HasSubstr("is not a finite time"));
}

}  // namespace
}  // namespace gpt::pipeline
