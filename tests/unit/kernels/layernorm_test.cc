#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"
#include "unit/kernels/reference.h"

namespace gpt {
namespace {
using namespace testing_util;

const DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
constexpr double kEps = 1e-5;

TEST(LayerNormReference, BackwardMatchesFiniteDifferences) {
  TensorFactory make(9);
  const int64_t rows = 3, h = 7;
  const reference::Vec x = values(make.random(DType::kFloat32, {rows, h})), w = values(make.random(DType::kFloat32, {h}));
  const reference::Vec dy = values(make.random(DType::kFloat32, {rows, h}));
  reference::Vec dx, dw, db;
  reference::layernorm_backward(dy, x, w, rows, h, kEps, dx, dw, db);
  const reference::Vec b(static_cast<size_t>(h), 0.1);
  auto objective = [&](const reference::Vec& input) {
    const reference::Vec y = reference::layernorm(input, w, b, rows, h, kEps).y;
    double total = 0;
    for (size_t i = 0; i < y.size(); ++i) total += dy[i] * y[i];
    return total;
  };
  EXPECT_LE(relative_error(dx, reference::numeric_gradient(objective, x)), 1e-7);
}

TEST(LayerNorm, ForwardResidualAndBackwardAgainstDoubleReference) {
  Context ctx = Context::cpu(1);
  TensorFactory make(10);
  // weight_offset 1: a zero-centred weight (--apply-layernorm-1p), the norm scaling by weight + 1.
  for (float offset : {0.0f, 1.0f}) {
    for (DType t : kTypes) {
      for (auto [rows, h] : {std::pair{1, 7}, std::pair{13, 129}, std::pair{32, 256}}) {
        Tensor x = make.random(t, {rows, h}, 2.0, 0.5), delta = make.random(t, {rows, h}), delta_bias = make.random(t, {h});
        Tensor w = make.random(t, {h}, 0.2, 1.0), b = make.random(t, {h});
        reference::Vec scale = values(w);
        for (double& v : scale) v += offset;
        Tensor y = make.poisoned(t, {rows, h}), residual = make.poisoned(t, {rows, h});
        Tensor mean = make.poisoned(DType::kFloat32, {rows}), rstd = make.poisoned(DType::kFloat32, {rows});
        ops::layernorm_forward(ctx, y, mean, rstd, x, w, b, kEps, offset);
        const auto want = reference::layernorm(values(x), scale, values(b), rows, h, kEps);
        EXPECT_LE(relative_error(y, want.y), tolerance(t)) << rows << "x" << h;
        EXPECT_LE(relative_error(mean, want.mean), 1e-6);
        EXPECT_LE(relative_error(rstd, want.rstd), 1e-6);
        // Fused residual: residual = x + delta + delta_bias (stored), y = LN(residual as stored).
        for (bool with_bias : {false, true}) {
          ops::residual_layernorm_forward(ctx, residual, y, mean, rstd, x, delta, with_bias ? delta_bias : Tensor(), w, b,
                                          kEps, offset);
          reference::Vec sum(values(x));
          for (int64_t i = 0; i < rows * h; ++i) sum[i] += at(delta, i) + (with_bias ? at(delta_bias, i % h) : 0.0);
          EXPECT_LE(relative_error(residual, sum), tolerance(t));
          const auto fused = reference::layernorm(values(residual), scale, values(b), rows, h, kEps);
          EXPECT_LE(relative_error(y, fused.y), tolerance(t));
        }
        // Backward, with and without accumulation into dx; weight and bias gradients accumulate.
        Tensor dy = make.random(t, {rows, h});
        reference::Vec dx_want, dw_want, db_want;
        reference::layernorm_backward(values(dy), values(residual), scale, rows, h, kEps, dx_want, dw_want, db_want);
        for (bool accumulate : {false, true}) {
          Tensor dx = accumulate ? make.random(t, {rows, h}) : make.poisoned(t, {rows, h});
          Tensor dw = make.random(DType::kFloat32, {h}), db = make.random(DType::kFloat32, {h});
          reference::Vec dx_total(dx_want), dw_total(dw_want), db_total(db_want);
          for (int64_t i = 0; i < rows * h && accumulate; ++i) dx_total[i] += at(dx, i);
          for (int64_t j = 0; j < h; ++j) {
            dw_total[j] += at(dw, j);
            db_total[j] += at(db, j);
          }
          ops::layernorm_backward(ctx, dx, dw, db, dy, residual, mean, rstd, w, accumulate, offset);
          EXPECT_LE(relative_error(dx, dx_total), tolerance(t) * 2) << "accumulate=" << accumulate;
          EXPECT_LE(relative_error(dw, dw_total), 1e-5);
          EXPECT_LE(relative_error(db, db_total), 1e-5);
        }
      }
    }
  }
}

}  // namespace
}  // namespace gpt
