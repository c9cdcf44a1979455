// The mixture-of-experts token permutation: moe_permute (gather into the expert-major buffer),
// moe_combine (weighted gather back) and moe_combine_weight_grad, in FP32, BF16 and FP16, against
// the double-precision reference, finite differences, and each other (combine is permute's adjoint).
#include <cmath>
#include <random>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"
#include "unit/kernels/moe_reference.h"

namespace gpt {
namespace {
using namespace testing_util;
namespace moe = reference::moe;
using reference::Vec;

const DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

// A capacity-limited dispatch of `tokens` tokens, k experts each, to `experts` experts of
// `capacity` rows: destination [T, k] (-1 for pairs past an expert's capacity: dropped) and its
// inverse source [M = experts * capacity] (-1 for unfilled rows: padding).
struct Dispatch {
  std::vector<int32_t> destination, source;
};
Dispatch capacity_dispatch(int64_t tokens, int64_t k, int64_t experts, int64_t capacity, uint32_t seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int64_t> pick(0, experts - 1);
  Dispatch d{std::vector<int32_t>(static_cast<size_t>(tokens * k), -1),
             std::vector<int32_t>(static_cast<size_t>(experts * capacity), -1)};
  std::vector<int64_t> filled(static_cast<size_t>(experts), 0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int64_t e = pick(rng);
      if (filled[static_cast<size_t>(e)] == capacity) continue;
      const int64_t row = e * capacity + filled[static_cast<size_t>(e)]++;
      d.destination[static_cast<size_t>(t * k + j)] = static_cast<int32_t>(row);
      d.source[static_cast<size_t>(row)] = static_cast<int32_t>(t);
    }
  }
  return d;
}

Tensor int_tensor(TensorFactory& make, const std::vector<int32_t>& v, Shape shape) {
  Tensor t = make.ints(shape, 0, 1);
  for (size_t i = 0; i < v.size(); ++i) t.data_as<int32_t>()[i] = v[i];
  return t;
}

int count_negative(const std::vector<int32_t>& v) {
  int n = 0;
  for (int32_t x : v) n += x < 0;
  return n;
}

TEST(MoePermute, GathersScalesAndZeroesPadding) {
  Context ctx = Context::cpu(2);
  TensorFactory make(61);
  const int64_t tokens = 9, k = 2, experts = 4, capacity = 5, m = experts * capacity;
  const Dispatch d = capacity_dispatch(tokens, k, experts, capacity, 7);
  ASSERT_GT(count_negative(d.source), 0) << "no padding rows: a weak test";
  for (DType t : kTypes) {
    for (int64_t h : {13, 64}) {
      for (bool scaled : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << " h=" << h << " scaled=" << scaled);
        Tensor x = make.random(t, {tokens, h}), out = make.poisoned(t, {m, h});
        Tensor scale = scaled ? make.random(DType::kFloat32, {m}) : Tensor();
        ops::moe_permute(ctx, out, x, int_tensor(make, d.source, {m}), scale);
        const Vec xs = values(x);
        Vec want(static_cast<size_t>(m * h), 0.0);
        for (int64_t i = 0; i < m; ++i) {
          const int32_t s = d.source[static_cast<size_t>(i)];
          if (s < 0) continue;
          for (int64_t c = 0; c < h; ++c)
            want[static_cast<size_t>(i * h + c)] = xs[static_cast<size_t>(s * h + c)] * (scaled ? at(scale, i) : 1.0);
        }
        EXPECT_LE(relative_error(out, want), tolerance(t));
        for (int64_t i = 0; i < m; ++i) {
          if (d.source[static_cast<size_t>(i)] < 0) EXPECT_EQ(at(out, i * h), 0.0) << "padding row " << i;
        }
      }
    }
  }
}

TEST(MoeCombine, WeightedSumOverTheSelectedRowsSkippingDroppedPairs) {
  Context ctx = Context::cpu(2);
  TensorFactory make(62);
  for (DType t : kTypes) {
    for (auto [tokens, k, h] : {std::tuple{11, 3, 13}, std::tuple{40, 2, 64}, std::tuple{5, 1, 7}}) {
      for (bool weighted : {false, true}) {
        SCOPED_TRACE(::testing::Message() << dtype_name(t) << " T=" << tokens << " k=" << k << " h=" << h << " weighted=" << weighted);
        const int64_t m = 3 * tokens;
        Tensor destination = make.ints({tokens, k}, -1, static_cast<int32_t>(m));  // -1: dropped
        Tensor rows = make.random(t, {m, h}), y = make.poisoned(t, {tokens, h});
        Tensor weights = weighted ? make.random(DType::kFloat32, {tokens, k}) : Tensor();
        ops::moe_combine(ctx, y, rows, destination, weights);
        const std::vector<int32_t> dest(destination.data_as<int32_t>(), destination.data_as<int32_t>() + tokens * k);
        EXPECT_LE(relative_error(y, moe::combine(values(rows), dest, weighted ? values(weights) : Vec(), tokens, k, h)),
                  tolerance(t));
      }
    }
  }
}

// dweights = the gradient of sum_t <dy[t], y[t]> with y = combine(rows, destination, weights):
// finite differences of the reference combine; 0 for dropped pairs.
TEST(MoeCombine, WeightGradientMatchesFiniteDifferences) {
  Context ctx = Context::cpu(2);
  TensorFactory make(63);
  for (DType t : kTypes) {
    const int64_t tokens = 17, k = 3, h = 24, m = 40;
    SCOPED_TRACE(dtype_name(t));
    Tensor destination = make.ints({tokens, k}, -1, static_cast<int32_t>(m));
    const std::vector<int32_t> dest(destination.data_as<int32_t>(), destination.data_as<int32_t>() + tokens * k);
    ASSERT_GT(count_negative(dest), 0) << "no dropped pair: a weak test";
    Tensor rows = make.random(t, {m, h}), dy = make.random(t, {tokens, h});
    Tensor weights = make.random(DType::kFloat32, {tokens, k}), dweights = make.poisoned(DType::kFloat32, {tokens, k});
    ops::moe_combine_weight_grad(ctx, dweights, dy, rows, destination);
    const Vec r = values(rows), g = values(dy);
    auto objective = [&](const Vec& w) {
      const Vec y = moe::combine(r, dest, w, tokens, k, h);
      double total = 0;
      for (size_t i = 0; i < y.size(); ++i) total += g[i] * y[i];
      return total;
    };
    // The operands are exact in double, so the only error is FP32 accumulation.
    EXPECT_LE(relative_error(dweights, reference::numeric_gradient(objective, values(weights))), 1e-5);
    for (int64_t i = 0; i < tokens * k; ++i) {
      if (dest[static_cast<size_t>(i)] < 0) EXPECT_EQ(at(dweights, i), 0.0) << "dropped pair " << i;
    }
  }
}

// The permutation's input gradient is combine by the inverse map: <dout, permute(x, row_scale)> =
// <combine(dout, destination, weights), x> with row_scale[destination[t, j]] = weights[t, j],
// through dropped pairs and padding rows.
TEST(MoeCombine, IsTheAdjointOfPermute) {
  Context ctx = Context::cpu(2);
  TensorFactory make(64);
  const int64_t tokens = 30, k = 2, experts = 4, capacity = 12, m = experts * capacity, h = 16;
  const Dispatch d = capacity_dispatch(tokens, k, experts, capacity, 11);
  ASSERT_GT(count_negative(d.destination), 0) << "no dropped pair: a weak test";
  ASSERT_GT(count_negative(d.source), 0) << "no padding row: a weak test";
  Tensor weights = make.random(DType::kFloat32, {tokens, k}), row_scale = make.random(DType::kFloat32, {m});
  for (int64_t i = 0; i < tokens * k; ++i) {
    if (d.destination[static_cast<size_t>(i)] >= 0) TensorFactory::set(row_scale, d.destination[static_cast<size_t>(i)], at(weights, i));
  }
  for (bool weighted : {false, true}) {
    SCOPED_TRACE(weighted ? "weighted" : "unweighted");
    Tensor x = make.random(DType::kFloat32, {tokens, h}), dout = make.random(DType::kFloat32, {m, h});
    Tensor out = make.poisoned(DType::kFloat32, {m, h}), dx = make.poisoned(DType::kFloat32, {tokens, h});
    ops::moe_permute(ctx, out, x, int_tensor(make, d.source, {m}), weighted ? row_scale : Tensor());
    ops::moe_combine(ctx, dx, dout, int_tensor(make, d.destination, {tokens, k}), weighted ? weights : Tensor());
    double forward = 0, backward = 0;
    for (int64_t i = 0; i < m * h; ++i) forward += at(dout, i) * at(out, i);
    for (int64_t i = 0; i < tokens * h; ++i) backward += at(dx, i) * at(x, i);
    EXPECT_NEAR(forward, backward, 1e-5 * std::abs(forward));
  }
}

// A destination with fewer rows than the tokens, or naming a row past the buffer, is refused (both
// were read out of bounds).
TEST(MoeCombine, WeightGradientRefusesMismatchedDestinations) {
  Context ctx = Context::cpu(1);
  TensorFactory make(65);
  Tensor rows = make.random(DType::kFloat32, {6, 8}), dy = make.random(DType::kFloat32, {4, 8});
  Tensor dweights = make.poisoned(DType::kFloat32, {4, 2});
  EXPECT_DEATH(ops::moe_combine_weight_grad(ctx, dweights, dy, rows, make.ints({2, 2}, 0, 6)), "MoE combine weight gradient");
  EXPECT_DEATH(ops::moe_combine_weight_grad(ctx, dweights, dy, rows, make.ints({4, 2}, 6, 7)), "MoE combine weight gradient row");
}

}  // namespace
}  // namespace gpt
