// FP8 (core/fp8.h's cast, the FP8 GEMM of the CPU backend, the amax op) against references written
// from the formats' bit layouts: every finite value decoded from its code, the nearest one found
// by search, ties to the even code.
#include <cmath>
#include <limits>
#include <random>
#include <vector>

#include "core/fp8.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"
#include "unit/kernels/reference.h"

namespace gpt {
namespace {
using namespace testing_util;

// The non-negative finite values in code order (OCP FP8: E4M3 has no infinities, S.1111.111 is
// its NaN; E5M2's top exponent holds infinities and NaNs).
std::vector<double> positive_values(Fp8Format format) {
  const int exponent_bits = format == Fp8Format::kE4M3 ? 4 : 5, mantissa_bits = 7 - exponent_bits;
  const int bias = format == Fp8Format::kE4M3 ? 7 : 15;
  std::vector<double> values;
  for (int code = 0; code < 128; ++code) {
    const int e = code >> mantissa_bits, m = code & ((1 << mantissa_bits) - 1);
    if (format == Fp8Format::kE5M2 && e == 31) break;
    if (format == Fp8Format::kE4M3 && e == 15 && m == 7) break;
    const double fraction = static_cast<double>(m) / (1 << mantissa_bits);
    values.push_back(e == 0 ? fraction * std::ldexp(1.0, 1 - bias) : (1.0 + fraction) * std::ldexp(1.0, e - bias));
  }
  return values;
}

double nearest(const std::vector<double>& grid, double x) {
  const double a = std::fabs(x);
  if (a >= grid.back()) return std::copysign(grid.back(), x);
  size_t above = 1;
  while (grid[above] < a) ++above;
  const double low = grid[above - 1], high = grid[above];
  const bool pick_high = a - low > high - a || (a - low == high - a && above % 2 == 0);
  return std::copysign(pick_high ? high : low, x);
}

TEST(Fp8, CastEqualsTheNearestValueOfTheDecodedFormat) {
  for (Fp8Format format : {Fp8Format::kE4M3, Fp8Format::kE5M2}) {
    const std::vector<double> grid = positive_values(format);
    EXPECT_EQ(grid.back(), fp8_limits(format).max_finite);
    std::vector<float> inputs = {0.0f, -0.0f, 1e-30f, 3e38f, -3e38f, std::numeric_limits<float>::infinity()};
    for (size_t i = 0; i + 1 < grid.size(); ++i) {  // every value, its neighbours and the midpoints
      for (double x : {grid[i], (grid[i] + grid[i + 1]) / 2, std::nextafter(grid[i], 0.0), grid[i] * 1.0000001}) {
        inputs.push_back(static_cast<float>(x));
        inputs.push_back(static_cast<float>(-x));
      }
    }
    std::mt19937 random(7);
    std::uniform_real_distribution<float> exponent(-20.0f, 17.0f);
    for (int i = 0; i < 20000; ++i) inputs.push_back(std::exp2(exponent(random)) * (i % 2 ? 1.0f : -1.0f));
    for (float x : inputs) {
      const float got = round_to_fp8(x, format);
      ASSERT_EQ(got, static_cast<float>(nearest(grid, x))) << fp8_format_name(format) << " x=" << x;
      ASSERT_EQ(std::signbit(got), std::signbit(x)) << fp8_format_name(format) << " x=" << x;
    }
    EXPECT_TRUE(std::isnan(round_to_fp8(std::nanf(""), format)));
  }
}

TEST(Fp8, GemmCastsBothOperandsAndAppliesTheInverseScales) {
  Context ctx = Context::cpu(2);
  TensorFactory make(11);
  const std::vector<double> e4m3 = positive_values(Fp8Format::kE4M3), e5m2 = positive_values(Fp8Format::kE5M2);
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    for (bool ta : {false, true}) {
      const int64_t m = 23, n = 17, k = 41;
      Tensor a = make.random(t, ta ? Shape({k, m}) : Shape({m, k})), b = make.random(t, {n, k});
      const float a_scale = 300.0f, b_scale = 0.75f;
      std::vector<double> qa = values(a), qb = values(b);
      for (double& v : qa) v = nearest(e5m2, static_cast<float>(static_cast<float>(v) * a_scale));
      for (double& v : qb) v = nearest(e4m3, static_cast<float>(static_cast<float>(v) * b_scale));
      reference::Vec want = reference::matmul(qa, qb, m, n, k, ta, true);
      Tensor bias = make.random(t, {n});
      for (int64_t i = 0; i < m * n; ++i) want[i] = want[i] / (a_scale * b_scale) + at(bias, i % n);
      Tensor out = make.poisoned(t, {m, n});
      ops::matmul(ctx, out, a, b,
                  {.transpose_a = ta, .transpose_b = true, .bias = bias,
                   .fp8 = {.enabled = true, .a_format = Fp8Format::kE5M2, .b_format = Fp8Format::kE4M3,
                           .a_scale = a_scale, .b_scale = b_scale}});
      EXPECT_LE(relative_error(out, want), t == DType::kFloat32 ? 1e-6 : 1e-2) << "ta=" << ta;
      // Without the casts the result is measurably different (the test can tell).
      reference::Vec plain = reference::matmul(values(a), values(b), m, n, k, ta, true);
      for (int64_t i = 0; i < m * n; ++i) plain[i] += at(bias, i % n);
      EXPECT_GT(relative_error(out, plain), 1e-3);
    }
  }
}

TEST(Fp8, AmaxIsTheLargestMagnitudeAndKeepsNaN) {
  Context ctx = Context::cpu(1);
  TensorFactory make(12);
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    Tensor x = make.random(t, {33, 7});
    double want = 0.0;
    for (double v : values(x)) want = std::max(want, std::fabs(v));
    Tensor out = make.random(DType::kFloat32, {1});
    out.data_as<float>()[0] = 0.0f;
    ops::amax(ctx, out, x);
    EXPECT_EQ(at(out, 0), want);
  }
  Tensor x = make.random(DType::kFloat32, {100});
  x.data_as<float>()[50] = std::nanf("");
  Tensor out = make.random(DType::kFloat32, {1});
  out.data_as<float>()[0] = 0.0f;
  ops::amax(ctx, out, x);
  EXPECT_TRUE(std::isnan(at(out, 0)));
}

}  // namespace
}  // namespace gpt
