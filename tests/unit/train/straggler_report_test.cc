// --log-straggler's report (train/report/straggler_report.h) against hand-computed lines.
#include "train/report/straggler_report.h"

#include <gtest/gtest.h>

#include <string>
#include <vector>

namespace gpt {
namespace {

// Four ranks on two nodes; rank 2 is the straggler. 2e12 FLOPs per rank per iteration: a rank
// computing for 100 ms reaches 20 TFLOP/s.
std::vector<RankComputeTime> four_ranks() {
  return {{.rank = 0, .node = "n1", .compute_ms = 100.0},
          {.rank = 1, .node = "n1", .compute_ms = 80.0},
          {.rank = 2, .node = "n2", .compute_ms = 400.0},
          {.rank = 3, .node = "n2", .compute_ms = 125.0}};
}

TEST(StragglerReport, NamesTheSlowestAndFastestRanksWithTheirNodes) {
  EXPECT_EQ(format_straggler_report(four_ranks(), 2e12, 1, "[2026-11-26 04:00:00]"),
            "[2026-11-26 04:00:00] | MnRtt/Rnk: 80.00ms/1 (n1) | MxRtt/Rnk: 400.00ms/2 (n2) | "
            "MnEtpt/Rnk: 5.00TF/2 (n2) | MxEtpt/Rnk: 25.00TF/1 (n1)");
}

TEST(StragglerReport, MinMaxCountListsTheLowestAndHighestThroughput) {
  const std::string report = format_straggler_report(four_ranks(), 2e12, 2, "[t]");
  EXPECT_NE(report.find("\n^^^^ Bottom 2 Ranks with lowest  Etpt(TF): 5.00/2 (n2), 16.00/3 (n2),\n"),
            std::string::npos)
      << report;
  EXPECT_NE(report.find("\n^^^^ Top    2 Ranks with highest Etpt(TF): 20.00/0 (n1), 25.00/1 (n1),"), std::string::npos)
      << report;
  // Megatron lists them only when 1 < N < world size.
  EXPECT_EQ(format_straggler_report(four_ranks(), 2e12, 4, "[t]").find("^^^^"), std::string::npos);
}

TEST(StragglerReport, EntriesSurviveTheGather) {
  const RankComputeTime entry{.rank = 7, .node = "node with spaces", .compute_ms = 12.3456789};
  const RankComputeTime back = decode_rank_compute_time(encode_rank_compute_time(entry));
  EXPECT_EQ(back.rank, 7);
  EXPECT_EQ(back.node, "node with spaces");
  EXPECT_DOUBLE_EQ(back.compute_ms, 12.3456789);
}

}  // namespace
}  // namespace gpt
