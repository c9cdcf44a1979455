#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"
#include "unit/kernels/reference.h"

namespace gpt {
namespace {
using namespace testing_util;

const DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
constexpr double kEps = 1e-5;

TEST(RmsNormReference, BackwardMatchesFiniteDifferences) {
  TensorFactory make(21);
  const int64_t rows = 3, h = 7;
  const reference::Vec x = values(make.random(DType::kFloat32, {rows, h})), w = values(make.random(DType::kFloat32, {h}));
  const reference::Vec dy = values(make.random(DType::kFloat32, {rows, h}));
  reference::Vec dx, dw;
  reference::rmsnorm_backward(dy, x, w, rows, h, kEps, dx, dw);
  auto objective = [&](const reference::Vec& input, const reference::Vec& weight) {
    const reference::Vec y = reference::rmsnorm(input, weight, rows, h, kEps).y;
    double total = 0;
    for (size_t i = 0; i < y.size(); ++i) total += dy[i] * y[i];
    return total;
  };
  EXPECT_LE(relative_error(dx, reference::numeric_gradient([&](const reference::Vec& v) { return objective(v, w); }, x)),
            1e-7);
  EXPECT_LE(relative_error(dw, reference::numeric_gradient([&](const reference::Vec& v) { return objective(x, v); }, w)),
            1e-7);
}

TEST(RmsNorm, ForwardResidualAndBackwardAgainstDoubleReference) {
  Context ctx = Context::cpu(1);
  TensorFactory make(22);
  // weight_offset 1: a zero-centred weight (--apply-layernorm-1p), the norm scaling by weight + 1.
  for (float offset : {0.0f, 1.0f}) {
    for (DType t : kTypes) {
      for (auto [rows, h] : {std::pair{1, 7}, std::pair{13, 129}, std::pair{32, 256}, std::pair{3, 1000}}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << " rows=" << rows << " h=" << h);
        Tensor x = make.random(t, {rows, h}, 2.0, 0.5), delta = make.random(t, {rows, h}), delta_bias = make.random(t, {h});
        Tensor w = make.random(t, {h}, 0.2, 1.0);
        reference::Vec scale = values(w);
        for (double& v : scale) v += offset;
        Tensor y = make.poisoned(t, {rows, h}), residual = make.poisoned(t, {rows, h});
        Tensor rstd = make.poisoned(DType::kFloat32, {rows});
        ops::rmsnorm_forward(ctx, y, rstd, x, w, kEps, offset);
        const auto want = reference::rmsnorm(values(x), scale, rows, h, kEps);
        EXPECT_LE(relative_error(y, want.y), tolerance(t));
        EXPECT_LE(relative_error(rstd, want.rstd), 1e-6);
        // Fused residual: residual = x + delta + delta_bias (stored), y = RMSNorm(residual as stored).
        for (bool with_bias : {false, true}) {
          ops::residual_rmsnorm_forward(ctx, residual, y, rstd, x, delta, with_bias ? delta_bias : Tensor(), w, kEps,
                                        offset);
          reference::Vec sum(values(x));
          for (int64_t i = 0; i < rows * h; ++i) sum[i] += at(delta, i) + (with_bias ? at(delta_bias, i % h) : 0.0);
          EXPECT_LE(relative_error(residual, sum), tolerance(t));
          const auto fused = reference::rmsnorm(values(residual), scale, rows, h, kEps);
          EXPECT_LE(relative_error(y, fused.y), tolerance(t));
          EXPECT_LE(relative_error(rstd, fused.rstd), 1e-6);
        }
        // The residual stream updated in place (residual aliasing x), as the model calls it.
        Tensor stream = make.copy(x);
        reference::Vec sum(values(x));
        for (int64_t i = 0; i < rows * h; ++i) sum[i] += at(delta, i) + at(delta_bias, i % h);
        ops::residual_rmsnorm_forward(ctx, stream, y, rstd, stream, delta, delta_bias, w, kEps, offset);
        EXPECT_LE(relative_error(stream, sum), tolerance(t));
        EXPECT_LE(relative_error(y, reference::rmsnorm(values(stream), scale, rows, h, kEps).y), tolerance(t));
        // Backward, with and without accumulation into dx; the weight gradient accumulates.
        Tensor dy = make.random(t, {rows, h});
        reference::Vec dx_want, dw_want;
        // rstd of `residual`
        ops::residual_rmsnorm_forward(ctx, residual, y, rstd, x, delta, delta_bias, w, kEps, offset);
        reference::rmsnorm_backward(values(dy), values(residual), scale, rows, h, kEps, dx_want, dw_want);
        for (bool accumulate : {false, true}) {
          Tensor dx = accumulate ? make.random(t, {rows, h}) : make.poisoned(t, {rows, h});
          Tensor dw = make.random(DType::kFloat32, {h});
          reference::Vec dx_total(dx_want), dw_total(dw_want);
          for (int64_t i = 0; i < rows * h && accumulate; ++i) dx_total[i] += at(dx, i);
          for (int64_t j = 0; j < h; ++j) dw_total[j] += at(dw, j);
          ops::rmsnorm_backward(ctx, dx, dw, dy, residual, rstd, w, accumulate, offset);
          EXPECT_LE(relative_error(dx, dx_total), tolerance(t) * 2) << "accumulate=" << accumulate;
          EXPECT_LE(relative_error(dw, dw_total), 1e-5);
        }
        // dx written over dy.
        Tensor dw = make.random(DType::kFloat32, {h});
        reference::Vec dw_total(dw_want);
        for (int64_t j = 0; j < h; ++j) dw_total[j] += at(dw, j);
        ops::rmsnorm_backward(ctx, dy, dw, dy, residual, rstd, w, false, offset);
        EXPECT_LE(relative_error(dy, dx_want), tolerance(t) * 2) << "in place";
        EXPECT_LE(relative_error(dw, dw_total), 1e-5);
      }
    }
  }
}

}  // namespace
}  // namespace gpt
