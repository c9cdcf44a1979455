#include "train/report/straggler_report.h"

#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstdio>
#include <cstdlib>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "parallel/comm/world_agreement.h"
#include "train/report/log_line.h"

namespace gpt {
namespace {

double tflops(const RankComputeTime& r, double flops) {
  return r.compute_ms > 0.0 ? flops / (r.compute_ms * 1e-3) / 1e12 : 0.0;
}

std::string who(const RankComputeTime& r) { return absl::StrCat(r.rank, " (", r.node, ")"); }

}  // namespace

std::string encode_rank_compute_time(const RankComputeTime& mine) {
  return absl::StrFormat("%d %.17g %s", mine.rank, mine.compute_ms, mine.node);
}

RankComputeTime decode_rank_compute_time(const std::string& text) {
  const std::vector<std::string> parts = absl::StrSplit(text, absl::MaxSplits(' ', 2));
  GPT_CHECK_EQ(parts.size(), 3u) << "straggler entry '" << text << "'";
  RankComputeTime r;
  r.rank = std::atoi(parts[0].c_str());
  r.compute_ms = std::strtod(parts[1].c_str(), nullptr);
  r.node = parts[2];
  return r;
}

std::string format_straggler_report(const std::vector<RankComputeTime>& ranks, double flops_per_rank_per_iteration,
                                    int minmax_count, const std::string& timestamp) {
  GPT_CHECK(!ranks.empty()) << "no ranks to report";
  // By compute time, ties by rank: [0] the fastest, back() the slowest.
  std::vector<RankComputeTime> by_time = ranks;
  std::sort(by_time.begin(), by_time.end(), [](const RankComputeTime& a, const RankComputeTime& b) {
    return a.compute_ms != b.compute_ms ? a.compute_ms < b.compute_ms : a.rank < b.rank;
  });
  const double flops = flops_per_rank_per_iteration;
  // By throughput, ascending (Megatron's sorted list): [0] the lowest.
  std::vector<RankComputeTime> by_throughput = ranks;
  std::sort(by_throughput.begin(), by_throughput.end(), [&](const RankComputeTime& a, const RankComputeTime& b) {
    const double ta = tflops(a, flops), tb = tflops(b, flops);
    return ta != tb ? ta < tb : a.rank < b.rank;
  });
  const RankComputeTime& fastest = by_time.front();
  const RankComputeTime& slowest = by_time.back();
  const RankComputeTime& lowest = by_throughput.front();
  const RankComputeTime& highest = by_throughput.back();
  std::string report = absl::StrFormat(
      "%s | MnRtt/Rnk: %.2fms/%s | MxRtt/Rnk: %.2fms/%s | MnEtpt/Rnk: %.2fTF/%s | MxEtpt/Rnk: %.2fTF/%s", timestamp,
      fastest.compute_ms, who(fastest), slowest.compute_ms, who(slowest), tflops(lowest, flops), who(lowest),
      tflops(highest, flops), who(highest));
  const int world = static_cast<int>(ranks.size());
  if (minmax_count > 1 && minmax_count < world) {
    absl::StrAppend(&report, "\n^^^^ Bottom ", minmax_count, " Ranks with lowest  Etpt(TF):");
    for (int i = 0; i < minmax_count; ++i) {
      const RankComputeTime& r = by_throughput[static_cast<size_t>(i)];
      absl::StrAppendFormat(&report, " %.2f/%s,", tflops(r, flops), who(r));
    }
    absl::StrAppend(&report, "\n^^^^ Top    ", minmax_count, " Ranks with highest Etpt(TF):");
    for (int i = world - minmax_count; i < world; ++i) {
      const RankComputeTime& r = by_throughput[static_cast<size_t>(i)];
      absl::StrAppendFormat(&report, " %.2f/%s,", tflops(r, flops), who(r));
    }
  }
  return report;
}

void report_stragglers(const ProcessGrid& grid, double compute_ms, double flops_per_rank_per_iteration,
                       int minmax_count) {
  const RankComputeTime mine{.rank = grid.world_rank(), .node = node_name(), .compute_ms = compute_ms};
  const std::vector<std::string> gathered = world::gather_to_rank0(encode_rank_compute_time(mine), "--log-straggler");
  if (grid.world_rank() != 0) return;
  std::vector<RankComputeTime> ranks;
  for (const std::string& text : gathered) ranks.push_back(decode_rank_compute_time(text));
  std::printf("%s\n", format_straggler_report(ranks, flops_per_rank_per_iteration, minmax_count,
                                              absl::StrCat("[", current_timestamp(), "]"))
                          .c_str());
  std::fflush(stdout);
}

std::string node_name() {
  // A test hook: a rank that pretends to run on another node (the rerun check's second stage).
  if (const char* pretended = std::getenv("GPT_TEST_NODE_NAME")) return pretended;
  char name[HOST_NAME_MAX + 1] = {};
  if (gethostname(name, sizeof(name) - 1) != 0) return "unknown";
  return name;
}

}  // namespace gpt
