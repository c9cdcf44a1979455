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

SplitMatrix split_matrix(const std::array<double, 3>& weights) {
  // Python's functools.reduce over [0, w0, w1, w2]: the running sums, added in this order.
  std::array<double, 4> ends{0.0, 0.0, 0.0, 0.0};
  for (int i = 0; i < 3; ++i) ends[i + 1] = ends[i] + weights[i];
  SplitMatrix matrix;
  for (int i = 0; i < 3; ++i) {
    if (ends[i + 1] > ends[i]) matrix[i] = std::make_pair(ends[i], ends[i + 1]);
  }
  return matrix;
}

std::array<DocumentRange, 3> split_documents(const std::array<double, 3>& weights, int64_t size) {
  const SplitMatrix matrix = split_matrix(weights);
  // int(round(fraction * float(n))): the product in double, rounded half to even.
  auto bound = [&](double fraction) { return static_cast<int64_t>(std::nearbyint(fraction * static_cast<double>(size))); };
  std::array<DocumentRange, 3> ranges;
  for (int i = 0; i < 3; ++i) {
    if (matrix[i]) ranges[i] = {bound(matrix[i]->first), bound(matrix[i]->second)};
  }
  return ranges;
}

}  // namespace gpt
