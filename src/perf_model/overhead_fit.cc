#include "perf_model/overhead_fit.h"

#include <algorithm>
#include <array>
#include <cmath>

namespace gpt::perf {
namespace {

constexpr int kTerms = 4;

std::array<double, kTerms> features(const OverheadSample& s) { return {s.ops, s.passes, s.collectives, 1.0}; }

// Solves a (n x n, n <= 4) x = b by Gaussian elimination with partial pivoting; false if singular.
bool solve(std::array<std::array<double, kTerms>, kTerms> a, std::array<double, kTerms> b, int n,
           std::array<double, kTerms>& x) {
  double scale = 0;
  for (int i = 0; i < n; ++i) scale = std::max(scale, std::fabs(a[i][i]));
  for (int col = 0; col < n; ++col) {
    int pivot = col;
    for (int row = col + 1; row < n; ++row) {
      if (std::fabs(a[row][col]) > std::fabs(a[pivot][col])) pivot = row;
    }
    if (std::fabs(a[pivot][col]) <= 1e-12 * scale) return false;
    std::swap(a[pivot], a[col]);
    std::swap(b[pivot], b[col]);
    for (int row = col + 1; row < n; ++row) {
      const double f = a[row][col] / a[col][col];
      for (int k = col; k < n; ++k) a[row][k] -= f * a[col][k];
      b[row] -= f * b[col];
    }
  }
  for (int row = n - 1; row >= 0; --row) {
    double sum = b[row];
    for (int k = row + 1; k < n; ++k) sum -= a[row][k] * x[k];
    x[row] = sum / a[row][row];
  }
  return true;
}

// Relative squared error of the samples with terms `coefficients` (per feature).
double relative_error(const std::vector<OverheadSample>& samples, const std::array<double, kTerms>& coefficients) {
  double sum = 0;
  int count = 0;
  for (const OverheadSample& s : samples) {
    if (s.measured_s <= 0) continue;
    const std::array<double, kTerms> f = features(s);
    double fitted = s.predicted_s;
    for (int t = 0; t < kTerms; ++t) fitted += coefficients[t] * f[t];
    const double r = (fitted - s.measured_s) / s.measured_s;
    sum += r * r, ++count;
  }
  return count ? sum / count : 0;
}

}  // namespace

OverheadFit fit_overheads(const std::vector<OverheadSample>& samples) {
  OverheadFit fit;
  double residual_sum = 0;
  for (const OverheadSample& s : samples) {
    if (s.measured_s <= 0) continue;
    ++fit.samples;
    residual_sum += (s.measured_s - s.predicted_s) / s.measured_s;
  }
  if (fit.samples == 0) return fit;
  fit.mean_relative_residual_before = residual_sum / fit.samples;
  std::array<double, kTerms> best{};
  double best_error = relative_error(samples, best);
  fit.rms_relative_error_before = std::sqrt(best_error);
  for (int subset = 1; subset < (1 << kTerms); ++subset) {
    std::array<int, kTerms> terms{};
    int n = 0;
    for (int t = 0; t < kTerms; ++t) {
      if (subset & (1 << t)) terms[n++] = t;
    }
    // Normal equations of the weighted problem: rows f / measured, targets residual / measured.
    std::array<std::array<double, kTerms>, kTerms> a{};
    std::array<double, kTerms> b{};
    for (const OverheadSample& s : samples) {
      if (s.measured_s <= 0) continue;
      const std::array<double, kTerms> f = features(s);
      const double w = 1.0 / (s.measured_s * s.measured_s);
      const double target = s.measured_s - s.predicted_s;
      for (int i = 0; i < n; ++i) {
        for (int j = 0; j < n; ++j) a[i][j] += w * f[terms[i]] * f[terms[j]];
        b[i] += w * f[terms[i]] * target;
      }
    }
    std::array<double, kTerms> x{};
    if (!solve(a, b, n, x)) continue;
    std::array<double, kTerms> coefficients{};
    bool non_negative = true;
    for (int i = 0; i < n; ++i) {
      non_negative = non_negative && x[i] >= 0;
      coefficients[terms[i]] = x[i];
    }
    if (!non_negative) continue;
    const double error = relative_error(samples, coefficients);
    if (error < best_error) best_error = error, best = coefficients;
  }
  fit.per_op_s = best[0];
  fit.per_pass_s = best[1];
  fit.per_collective_s = best[2];
  fit.per_iteration_s = best[3];
  fit.rms_relative_error = std::sqrt(best_error);
  return fit;
}

}  // namespace gpt::perf
