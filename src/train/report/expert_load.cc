#include "train/report/expert_load.h"

#include <algorithm>
#include <cmath>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "core/check.h"

namespace gpt {

std::vector<double> tokens_per_expert_parallel_rank(const std::vector<double>& tokens_per_expert,
                                                    int64_t expert_model_parallel) {
  const auto experts = static_cast<int64_t>(tokens_per_expert.size());
  GPT_CHECK(expert_model_parallel >= 1 && experts % expert_model_parallel == 0)
      << experts << " experts over " << expert_model_parallel << " expert-parallel ranks";
  const int64_t local = experts / expert_model_parallel;
  std::vector<double> ranks(static_cast<size_t>(expert_model_parallel), 0.0);
  for (int64_t e = 0; e < experts; ++e) ranks[static_cast<size_t>(e / local)] += tokens_per_expert[static_cast<size_t>(e)];
  return ranks;
}

double busiest_over_mean(const std::vector<double>& tokens) {
  if (tokens.empty()) return NAN;
  const double mean = std::accumulate(tokens.begin(), tokens.end(), 0.0) / static_cast<double>(tokens.size());
  return mean > 0 ? *std::max_element(tokens.begin(), tokens.end()) / mean : NAN;
}

std::string expert_parallel_load_line(const std::vector<std::pair<int64_t, std::vector<double>>>& tokens,
                                      int64_t expert_model_parallel, int64_t iterations) {
  if (tokens.empty() || iterations <= 0) return std::string();
  double worst = -1.0;
  int64_t worst_layer = -1;
  std::string per_layer;
  for (const auto& [layer, per_expert] : tokens) {
    const double ratio = busiest_over_mean(tokens_per_expert_parallel_rank(per_expert, expert_model_parallel));
    absl::StrAppend(&per_layer, absl::StrFormat(" %.3f", ratio));
    if (std::isfinite(ratio) && ratio > worst) {
      worst = ratio;
      worst_layer = layer;
    }
  }
  if (worst_layer < 0) return std::string();
  return absl::StrFormat(
      "> expert-parallel load over %d iterations (EP %d): busiest rank's routed tokens / mean %.3f (layer %d); "
      "per MoE layer:%s",
      iterations, expert_model_parallel, worst, worst_layer, per_layer);
}

}  // namespace gpt
