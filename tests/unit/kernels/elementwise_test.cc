#include <algorithm>
#include <cmath>
#include <cstring>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"
#include "unit/kernels/reference.h"

namespace gpt {
namespace {
using namespace testing_util;

const DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

TEST(GeluReference, DerivativeMatchesFiniteDifferences) {
  for (double x : {-3.0, -0.7, 0.0, 0.4, 2.5}) {
    const double numeric = (reference::gelu(x + 1e-6) - reference::gelu(x - 1e-6)) / 2e-6;
    EXPECT_NEAR(reference::gelu_derivative(x), numeric, 1e-8);
  }
}

TEST(Elementwise, ResidualAddGeluAndBackward) {
  Context ctx = Context::cpu(1);
  TensorFactory make(11);
  for (DType t : kTypes) {
    for (auto [rows, h] : {std::pair{1, 1}, std::pair{7, 13}, std::pair{33, 64}}) {
      Tensor x = make.random(t, {rows, h}, 2.0), d = make.random(t, {rows, h}), bias = make.random(t, {h});
      reference::Vec want(values(x));
      for (int64_t i = 0; i < rows * h; ++i) want[i] += at(d, i) + at(bias, i % h);
      Tensor out = make.poisoned(t, {rows, h});
      ops::residual_add(ctx, out, x, d, bias);
      EXPECT_LE(relative_error(out, want), tolerance(t));
      ops::residual_add(ctx, x, x, d, bias);  // in place
      EXPECT_LE(relative_error(x, want), tolerance(t));
      reference::Vec y_want, dx_want;
      Tensor dy = make.random(t, {rows, h});
      for (int64_t i = 0; i < rows * h; ++i) {
        y_want.push_back(reference::gelu(at(x, i)));
        dx_want.push_back(at(dy, i) * reference::gelu_derivative(at(x, i)));
      }
      Tensor y = make.poisoned(t, {rows, h});
      ops::gelu_forward(ctx, y, x);
      EXPECT_LE(relative_error(y, y_want), tolerance(t));
      ops::gelu_backward(ctx, dy, dy, x);  // dx aliasing dy
      EXPECT_LE(relative_error(dy, dx_want), tolerance(t));
    }
  }
}

// The exact GeLU against its definition in double (x Phi(x), Phi by std::erfc for accuracy in the
// left tail), its derivative against finite differences of that definition; a multi-threaded
// context gives the same bytes as one thread.
TEST(Elementwise, ExactGeluAndBackward) {
  auto gelu = [](double x) { return x * 0.5 * std::erfc(-x / std::sqrt(2.0)); };
  Context ctx = Context::cpu(1), threaded = Context::cpu(3);
  TensorFactory make(13);
  for (DType t : kTypes) {
    for (auto [rows, h] : {std::pair{1, 1}, std::pair{7, 13}, std::pair{129, 301}}) {
      Tensor x = make.random(t, {rows, h}, 4.0), dy = make.random(t, {rows, h});
      reference::Vec y_want, dx_want;
      for (int64_t i = 0; i < rows * h; ++i) {
        const double v = at(x, i);
        y_want.push_back(gelu(v));
        dx_want.push_back(at(dy, i) * (gelu(v + 1e-5) - gelu(v - 1e-5)) / 2e-5);
      }
      Tensor y = make.poisoned(t, {rows, h}), y_threaded = make.poisoned(t, {rows, h});
      ops::gelu_exact_forward(ctx, y, x);
      ops::gelu_exact_forward(threaded, y_threaded, x);
      EXPECT_LE(relative_error(y, y_want), tolerance(t));
      EXPECT_EQ(std::memcmp(y.data(), y_threaded.data(), y.bytes()), 0);
      ops::gelu_exact_backward(ctx, dy, dy, x);  // dx aliasing dy
      EXPECT_LE(relative_error(dy, dx_want), t == DType::kFloat32 ? 1e-5 : tolerance(t));
    }
  }
  // Where the tanh approximation and the exact GeLU differ most (|x| near 2), this is the exact one.
  Tensor x = make.random(DType::kFloat32, {1}), y = make.poisoned(DType::kFloat32, {1});
  x.data_as<float>()[0] = -2.0f;
  ops::gelu_exact_forward(ctx, y, x);
  EXPECT_NEAR(y.data_as<float>()[0], gelu(-2.0), 1e-7);
  EXPECT_GT(std::abs(y.data_as<float>()[0] - reference::gelu(-2.0)), 5e-5);  // 9.8e-5 there
}

// Squared ReLU (Megatron's --squared-relu) against relu(x)^2 in double and its derivative 2 relu(x)
// (exactly 0 at and left of 0); a multi-threaded context gives the same bytes as one thread.
TEST(Elementwise, SquaredReluAndBackward) {
  Context ctx = Context::cpu(1), threaded = Context::cpu(3);
  TensorFactory make(14);
  for (DType t : kTypes) {
    for (auto [rows, h] : {std::pair{1, 1}, std::pair{7, 13}, std::pair{129, 301}}) {
      Tensor x = make.random(t, {rows, h}, 3.0), dy = make.random(t, {rows, h});
      reference::Vec y_want, dx_want;
      for (int64_t i = 0; i < rows * h; ++i) {
        const double r = std::max(at(x, i), 0.0);
        y_want.push_back(r * r);
        dx_want.push_back(at(dy, i) * 2.0 * r);
      }
      Tensor y = make.poisoned(t, {rows, h}), y_threaded = make.poisoned(t, {rows, h});
      ops::squared_relu_forward(ctx, y, x);
      ops::squared_relu_forward(threaded, y_threaded, x);
      EXPECT_LE(relative_error(y, y_want), tolerance(t));
      EXPECT_EQ(std::memcmp(y.data(), y_threaded.data(), y.bytes()), 0);
      ops::squared_relu_backward(ctx, dy, dy, x);  // dx aliasing dy
      EXPECT_LE(relative_error(dy, dx_want), tolerance(t));
      for (int64_t i = 0; i < rows * h; ++i) {
        if (at(x, i) <= 0.0) EXPECT_EQ(at(dy, i), 0.0) << "gradient left of 0 at " << i;
      }
    }
  }
}

TEST(Elementwise, CastsRoundToNearestEvenAndReductionsAreExactEnough) {
  Context ctx = Context::cpu(1);
  TensorFactory make(12);
  Tensor f = make.random(DType::kFloat32, {1001}, 3.0);
  Tensor h = make.poisoned(DType::kBFloat16, {1001}), back = make.poisoned(DType::kFloat32, {1001});
  ops::cast(ctx, h, f);
  ops::cast(ctx, back, h);
  for (int64_t i = 0; i < 1001; ++i) {
    ASSERT_EQ(h.data_as<bf16>()[i].bits, float_to_bf16_bits(f.data_as<float>()[i]));
    ASSERT_EQ(back.data_as<float>()[i], h.data_as<bf16>()[i].to_float());
  }
  // FP16 the same way, and FP16 <-> BF16 through FP32 (one rounding: widening is exact); values
  // beyond 65504 become infinite.
  Tensor half = make.poisoned(DType::kFloat16, {1001}), brain = make.poisoned(DType::kBFloat16, {1001});
  f.data_as<float>()[7] = 70000.0f;
  ops::cast(ctx, half, f);
  ops::cast(ctx, back, half);
  ops::cast(ctx, brain, half);
  for (int64_t i = 0; i < 1001; ++i) {
    ASSERT_EQ(half.data_as<fp16>()[i].bits, float_to_fp16_bits(f.data_as<float>()[i]));
    ASSERT_EQ(back.data_as<float>()[i], half.data_as<fp16>()[i].to_float());
    ASSERT_EQ(brain.data_as<bf16>()[i].bits, float_to_bf16_bits(half.data_as<fp16>()[i].to_float()));
  }
  ASSERT_TRUE(std::isinf(back.data_as<float>()[7]));
  f.data_as<float>()[7] = 1.0f;
  Tensor total = make.random(DType::kFloat32, {1}), squares = make.random(DType::kFloat32, {1});
  double sum = at(total, 0), sum_squares = at(squares, 0);
  for (int64_t i = 0; i < 1001; ++i) {
    sum += at(f, i);
    sum_squares += at(f, i) * at(f, i);
  }
  ops::sum(ctx, total, f);
  ops::sum_of_squares(ctx, squares, f);
  EXPECT_NEAR(at(total, 0), sum, 1e-5 * std::abs(sum) + 1e-5);
  EXPECT_NEAR(at(squares, 0), sum_squares, 1e-6 * sum_squares);
  reference::Vec scaled = values(f);
  for (double& v : scaled) v *= 0.25;
  ops::scale(ctx, f, 0.25f);
  EXPECT_EQ(relative_error(f, scaled), 0.0);
  Tensor duplicate = make.poisoned(DType::kFloat32, {1001});
  ops::copy(ctx, duplicate, f);
  EXPECT_EQ(relative_error(duplicate, values(f)), 0.0);
  ops::zero(ctx, f);
  EXPECT_EQ(relative_error(f, reference::Vec(1001, 0.0)), 0.0);
}

TEST(Elementwise, CountZerosAddsTheExactCount) {
  Context ctx = Context::cpu(1);
  TensorFactory make(7);
  Tensor x = make.random(DType::kFloat32, {4099});
  int64_t want = 5;  // already in the counter: the op adds
  for (int64_t i = 0; i < x.numel(); i += 3) {
    x.data_as<float>()[i] = (i % 2 == 0) ? 0.0f : -0.0f;  // both signed zeros count
    ++want;
  }
  Arena arena(Device::kCpu, "count");
  Tensor count = arena.allocate(DType::kInt64, {1});
  count.data_as<int64_t>()[0] = 5;
  ops::count_zeros(ctx, count, x);
  EXPECT_EQ(count.data_as<int64_t>()[0], want);
}

TEST(Elementwise, CountNonFiniteCountsInfinitiesAndNans) {
  Context ctx = Context::cpu(1);
  TensorFactory make(8);
  Tensor x = make.random(DType::kFloat32, {4099}, 1e30);  // huge but finite values do not count
  const float specials[] = {INFINITY, -INFINITY, NAN, -NAN};
  int64_t want = 2;  // already in the counter: the op adds
  for (int64_t i = 1; i < x.numel(); i += 97) {
    x.data_as<float>()[i] = specials[(i / 97) % 4];
    ++want;
  }
  Arena arena(Device::kCpu, "count");
  Tensor count = arena.allocate(DType::kInt64, {1});
  count.data_as<int64_t>()[0] = 2;
  ops::count_non_finite(ctx, count, x);
  EXPECT_EQ(count.data_as<int64_t>()[0], want);
}

}  // namespace
}  // namespace gpt
