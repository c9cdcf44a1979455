#include <cmath>
#include <tuple>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"
#include "unit/kernels/reference.h"

namespace gpt {
namespace {
using namespace testing_util;

const DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};
constexpr float kBase = 10000.0f;

TEST(RopeReference, BackwardIsTheGradientOfForward) {
  TensorFactory make(41);
  const int64_t s = 5, rows_per_position = 2, heads_per_group = 4, d = 6, rotary_dim = 4;
  const reference::Vec x = values(make.random(DType::kFloat32, {s, rows_per_position, heads_per_group * d}));
  const reference::Vec dy = values(make.random(DType::kFloat32, {s, rows_per_position, heads_per_group * d}));
  auto objective = [&](const reference::Vec& input) {
    const reference::Vec y = reference::rope(input, s, rows_per_position, heads_per_group, d, rotary_dim, kBase, true);
    double total = 0;
    for (size_t i = 0; i < y.size(); ++i) total += dy[i] * y[i];
    return total;
  };
  const reference::Vec dx = reference::rope(dy, s, rows_per_position, heads_per_group, d, rotary_dim, kBase, false);
  EXPECT_LE(relative_error(dx, reference::numeric_gradient(objective, x)), 1e-8);
}

TEST(Rope, ForwardAndBackwardInPlaceAgainstDoubleReference) {
  Context ctx = Context::cpu(1);
  TensorFactory make(42);
  // (s, b, groups, q, d, rotary_dim): one position; multi-head attention (q = 1); grouped queries
  // (q = 3) with a partial rotary width; long sequences (large angles, FP32 angle rounding).
  for (DType t : kTypes) {
    for (auto [s, b, groups, q, d, rotary_dim] :
         {std::tuple{1, 1, 1, 1, 8, 8}, std::tuple{7, 2, 3, 1, 16, 16}, std::tuple{13, 3, 2, 3, 12, 8},
          std::tuple{300, 1, 2, 2, 64, 64}, std::tuple{1100, 1, 1, 1, 10, 6}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " s=" << s << " b=" << b << " groups=" << groups << " q=" << q
                                        << " d=" << d << " rotary_dim=" << rotary_dim);
      const int64_t width = (q + 2) * d;
      Tensor qkv = make.random(t, {s, b, groups, width});
      const reference::Vec before = values(qkv);
      ops::rope_forward(ctx, qkv, d, rotary_dim, kBase, 0, false);
      const reference::Vec want = reference::rope(before, s, b * groups, q + 2, d, rotary_dim, kBase, true);
      EXPECT_LE(relative_error(qkv, want), tolerance(t));
      // Value heads and the dims past rotary_dim are untouched, bit for bit.
      for (int64_t row = 0; row < s * b * groups; ++row) {
        for (int64_t c = 0; c < width; ++c) {
          const bool value_head = c >= (q + 1) * d, pass_through = c % d >= rotary_dim;
          if (value_head || pass_through) ASSERT_EQ(at(qkv, row * width + c), before[row * width + c]) << c;
        }
      }
      // Backward on a gradient, in place; and backward undoes forward (the rotation is orthogonal).
      Tensor dqkv = make.random(t, {s, b, groups, width});
      const reference::Vec dwant = reference::rope(values(dqkv), s, b * groups, q + 2, d, rotary_dim, kBase, false);
      ops::rope_backward(ctx, dqkv, d, rotary_dim, kBase, 0, false);
      EXPECT_LE(relative_error(dqkv, dwant), tolerance(t));
      ops::rope_backward(ctx, qkv, d, rotary_dim, kBase, 0, false);
      EXPECT_LE(relative_error(qkv, before), 2 * tolerance(t)) << "backward(forward(x)) = x";
    }
  }
}

// --rotary-interleaved: pairs (x_2j, x_2j+1). The reference permutes each head's rotary dims to the
// halves layout (x_2j -> j, x_2j+1 -> half + j), rotates there (the non-interleaved reference) and
// permutes back.
TEST(Rope, InterleavedAgainstThePermutedReference) {
  Context ctx = Context::cpu(2);
  TensorFactory make(44);
  for (DType t : kTypes) {
    for (auto [s, b, groups, q, d, rotary_dim] : {std::tuple{7, 2, 3, 1, 16, 16}, std::tuple{13, 3, 2, 3, 12, 8}}) {
      const int64_t width = (q + 2) * d, rows = s * b * groups, half = rotary_dim / 2;
      auto permute = [&](const reference::Vec& x, bool to_halves) {
        reference::Vec y = x;
        for (int64_t row = 0; row < rows; ++row) {
          for (int64_t head = 0; head < q + 2; ++head) {
            const int64_t base = row * width + head * d;
            for (int64_t j = 0; j < half; ++j) {
              if (to_halves) {
                y[base + j] = x[base + 2 * j];
                y[base + half + j] = x[base + 2 * j + 1];
              } else {
                y[base + 2 * j] = x[base + j];
                y[base + 2 * j + 1] = x[base + half + j];
              }
            }
          }
        }
        return y;
      };
      Tensor qkv = make.random(t, {s, b, groups, width});
      const reference::Vec before = values(qkv);
      ops::rope_forward(ctx, qkv, d, rotary_dim, kBase, 0, true);
      const reference::Vec want = permute(
          reference::rope(permute(before, true), s, b * groups, q + 2, d, rotary_dim, kBase, true), false);
      EXPECT_LE(relative_error(qkv, want), tolerance(t));
      Tensor dqkv = make.random(t, {s, b, groups, width});
      const reference::Vec dwant = permute(
          reference::rope(permute(values(dqkv), true), s, b * groups, q + 2, d, rotary_dim, kBase, false), false);
      ops::rope_backward(ctx, dqkv, d, rotary_dim, kBase, 0, true);
      EXPECT_LE(relative_error(dqkv, dwant), tolerance(t));
    }
  }
}

TEST(Rope, AnglesAreMegatronsFp32Values) {
  // The contract's angle is FP32: inv_freq_j = 1 / base^(2j / rotary_dim) rounded to float, then
  // t * inv_freq_j rounded to float (Megatron's arithmetic). Rotating (1, 0) gives its cosine and
  // sine exactly, which the CPU evaluates in double and rounds.
  Context ctx = Context::cpu(1);
  const int64_t s = 1001, d = 4;
  TensorFactory make(43);
  Tensor qkv = make.poisoned(DType::kFloat32, {s, 1, 1, 3 * d});
  for (int64_t i = 0; i < qkv.numel(); ++i) TensorFactory::set(qkv, i, i % d == 0 ? 1.0 : 0.0);
  ops::rope_forward(ctx, qkv, d, d, kBase, 0, false);
  for (int64_t t : {int64_t{1}, int64_t{999}, int64_t{1000}}) {
    for (int64_t j = 0; j < d / 2; ++j) {
      const float inv_freq = 1.0f / std::pow(kBase, static_cast<float>(2 * j) / static_cast<float>(d));
      const float angle = static_cast<float>(t) * inv_freq;
      const int64_t first = t * 3 * d;  // the first query head of position t: x1 = (1, 0), x2 = (0, 0)
      if (j == 0) {
        EXPECT_EQ(at(qkv, first + j), static_cast<float>(std::cos(static_cast<double>(angle)))) << t;
        EXPECT_EQ(at(qkv, first + d / 2 + j), static_cast<float>(std::sin(static_cast<double>(angle)))) << t;
      } else {
        EXPECT_EQ(at(qkv, first + j), 0.0f);
        EXPECT_EQ(at(qkv, first + d / 2 + j), 0.0f);
      }
    }
  }
}

}  // namespace
}  // namespace gpt
