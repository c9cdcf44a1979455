#include "data/dataset_split.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"

namespace gpt {

absl::StatusOr<std::array<double, 3>> parse_split(const std::string& text) {
  std::array<double, 3> weights{0.0, 0.0, 0.0};
  const std::vector<std::string> parts = absl::StrSplit(text, absl::ByAnyChar(",/"));
  if (parts.empty() || parts.size() > 3) {
    return absl::InvalidArgumentError(absl::StrCat("--split must have one to three weights (got '", text, "')"));
  }
  double total = 0.0;
  for (size_t i = 0; i < parts.size(); ++i) {
    if (!absl::SimpleAtod(parts[i], &weights[i]) || !(weights[i] >= 0.0)) {
      return absl::InvalidArgumentError(absl::StrCat("--split weights must be non-negative numbers (got '", text, "')"));
    }
    total += weights[i];
  }
  if (!(total > 0.0)) return absl::InvalidArgumentError(absl::StrCat("--split weights sum to zero ('", text, "')"));
  for (double& w : weights) w /= total;
  return weights;
}

std::array<DocumentRange, 3> split_documents(const std::array<double, 3>& weights, int64_t size) {
  std::array<int64_t, 4> bounds{0, 0, 0, 0};
  for (int i = 0; i < 3; ++i) {
    bounds[i + 1] = bounds[i] + static_cast<int64_t>(std::nearbyint(weights[i] * static_cast<double>(size)));  // Python round: half to even
  }
  const int64_t drift = bounds[3] - size;
  for (int i = 1; i < 4; ++i) bounds[i] -= drift;
  std::array<DocumentRange, 3> ranges;
  for (int i = 0; i < 3; ++i) ranges[i] = {bounds[i], bounds[i + 1]};
  return ranges;
}

}  // namespace gpt
