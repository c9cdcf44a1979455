#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"
#include "unit/kernels/reference.h"

namespace gpt {
namespace {
using namespace testing_util;

const DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

TEST(Matmul, AllTransposesBiasAndGeluAgainstDoubleReference) {
  Context ctx = Context::cpu(1);
  TensorFactory make(3);
  for (DType t : kTypes) {
    for (auto [m, n, k] : {std::tuple{1, 1, 1}, std::tuple{17, 33, 65}, std::tuple{64, 48, 100}}) {
      for (bool ta : {false, true}) {
        for (bool tb : {false, true}) {
          Tensor a = make.random(t, ta ? Shape({k, m}) : Shape({m, k}));
          Tensor b = make.random(t, tb ? Shape({n, k}) : Shape({k, n}));
          Tensor bias = make.random(t, {n});
          const reference::Vec product = reference::matmul(values(a), values(b), m, n, k, ta, tb);
          reference::Vec with_bias(product), activated(product);
          for (int64_t i = 0; i < m * n; ++i) {
            with_bias[i] += at(bias, i % n);
            activated[i] = reference::gelu(with_bias[i]);
          }
          Tensor out = make.poisoned(t, {m, n});
          ops::matmul(ctx, out, a, b, {.transpose_a = ta, .transpose_b = tb});
          EXPECT_LE(relative_error(out, product), tolerance(t)) << m << "x" << n << "x" << k << " ta=" << ta << " tb=" << tb;
          ops::matmul(ctx, out, a, b, {.transpose_a = ta, .transpose_b = tb, .bias = bias});
          EXPECT_LE(relative_error(out, with_bias), tolerance(t));
          Tensor pre = make.poisoned(t, {m, n});
          ops::matmul(ctx, out, a, b, {.transpose_a = ta, .transpose_b = tb, .bias = bias, .pre_gelu = pre});
          EXPECT_LE(relative_error(out, activated), tolerance(t));
          EXPECT_LE(relative_error(pre, with_bias), tolerance(t));
        }
      }
    }
  }
}

TEST(Matmul, AccumulatesIntoFloat32WithAlphaAndBeta) {
  Context ctx = Context::cpu(1);
  TensorFactory make(4);
  for (DType t : kTypes) {
    Tensor a = make.random(t, {37, 29}), b = make.random(t, {37, 11});
    Tensor out = make.random(DType::kFloat32, {29, 11});
    reference::Vec want = reference::matmul(values(a), values(b), 29, 11, 37, true, false);
    const reference::Vec before = values(out);
    for (size_t i = 0; i < want.size(); ++i) want[i] = 0.5 * want[i] + before[i];
    ops::matmul(ctx, out, a, b, {.transpose_a = true, .alpha = 0.5f, .beta = 1.0f});
    EXPECT_LE(relative_error(out, want), 1e-6);
  }
}

TEST(Matmul, BiasGradAccumulatesColumnSums) {
  Context ctx = Context::cpu(1);
  TensorFactory make(5);
  for (DType t : kTypes) {
    Tensor dy = make.random(t, {53, 19}), grad = make.random(DType::kFloat32, {19});
    reference::Vec want = values(grad);
    for (int64_t r = 0; r < 53; ++r) {
      for (int64_t c = 0; c < 19; ++c) want[c] += at(dy, r * 19 + c);
    }
    ops::bias_grad(ctx, grad, dy);
    EXPECT_LE(relative_error(grad, want), 1e-6);
  }
}

TEST(MatmulDeathTest, WrongInnerDimensionIsFatal) {
  Context ctx = Context::cpu(1);
  TensorFactory make;
  Tensor a = make.random(DType::kFloat32, {4, 5}), b = make.random(DType::kFloat32, {6, 3}), out = make.random(DType::kFloat32, {4, 3});
  EXPECT_DEATH(ops::matmul(ctx, out, a, b), "matmul inner dims");
}

}  // namespace
}  // namespace gpt
