#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"
#include "unit/kernels/reference.h"

namespace gpt {
namespace {
using namespace testing_util;

const DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

TEST(SwiGluReference, BackwardMatchesFiniteDifferences) {
  TensorFactory make(31);
  const int64_t rows = 3, f = 5;
  const reference::Vec x = values(make.random(DType::kFloat32, {rows, 2 * f}, 2.0));
  const reference::Vec dy = values(make.random(DType::kFloat32, {rows, f}));
  auto objective = [&](const reference::Vec& input) {
    const reference::Vec y = reference::swiglu(input, rows, f);
    double total = 0;
    for (size_t i = 0; i < y.size(); ++i) total += dy[i] * y[i];
    return total;
  };
  EXPECT_LE(relative_error(reference::swiglu_backward(x, dy, rows, f), reference::numeric_gradient(objective, x)), 1e-8);
}

TEST(SwiGlu, ForwardAndBackwardAgainstDoubleReference) {
  Context ctx = Context::cpu(1);
  TensorFactory make(32);
  for (DType t : kTypes) {
    for (auto [rows, f] : {std::pair{1, 1}, std::pair{7, 13}, std::pair{33, 64}, std::pair{4, 1000}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " rows=" << rows << " f=" << f);
      // Gates far enough out to saturate the sigmoid on both sides.
      Tensor x = make.random(t, {rows, 2 * f}, 3.0), y = make.poisoned(t, {rows, f});
      ops::swiglu_forward(ctx, y, x);
      EXPECT_LE(relative_error(y, reference::swiglu(values(x), rows, f)), tolerance(t));
      Tensor dy = make.random(t, {rows, f}), dx = make.poisoned(t, {rows, 2 * f});
      const reference::Vec dx_want = reference::swiglu_backward(values(x), values(dy), rows, f);
      ops::swiglu_backward(ctx, dx, dy, x);
      EXPECT_LE(relative_error(dx, dx_want), tolerance(t));
      ops::swiglu_backward(ctx, x, dy, x);  // dx written over x
      EXPECT_LE(relative_error(x, dx_want), tolerance(t)) << "in place";
    }
  }
}

TEST(SwiGlu, ExtremeGatesStayFinite) {
  Context ctx = Context::cpu(1);
  TensorFactory make(33);
  Tensor x = make.poisoned(DType::kFloat32, {1, 8}), y = make.poisoned(DType::kFloat32, {1, 4});
  const double gates[] = {-200.0, -90.0, 90.0, 200.0};
  for (int j = 0; j < 4; ++j) {
    TensorFactory::set(x, j, gates[j]);
    TensorFactory::set(x, 4 + j, 1.5);
  }
  ops::swiglu_forward(ctx, y, x);
  Tensor dy = make.random(DType::kFloat32, {1, 4}, 1.0, 2.0), dx = make.poisoned(DType::kFloat32, {1, 8});
  ops::swiglu_backward(ctx, dx, dy, x);
  const reference::Vec y_want = reference::swiglu(values(x), 1, 4);
  const reference::Vec dx_want = reference::swiglu_backward(values(x), values(dy), 1, 4);
  for (int j = 0; j < 4; ++j) EXPECT_NEAR(at(y, j), y_want[j], 1e-5 * std::abs(y_want[j]) + 1e-30) << gates[j];
  for (int j = 0; j < 8; ++j) EXPECT_NEAR(at(dx, j), dx_want[j], 1e-5 * std::abs(dx_want[j]) + 1e-30) << j;
}

}  // namespace
}  // namespace gpt
