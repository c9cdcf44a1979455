#include <algorithm>
#include <cmath>
#include <vector>
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

// Llama 3.1's frequency scaling (--use-rope-scaling) against its definition (Megatron's
// RotaryEmbedding._apply_scaling, transformers' rope_type "llama3") evaluated here in double on
// the unscaled FP32 frequencies: Llama 3.1 8B's head dim 128, base 500000, factor 8.
TEST(RopeScaling, FrequenciesAgainstTheLlama31Definition) {
  const int64_t rotary_dim = 128;
  const float base = 500000.0f;
  RopeScaling scaling;
  scaling.enabled = true;
  const std::vector<float> plain = rope_inverse_frequencies(RopeFrequencies(base), rotary_dim);
  const std::vector<float> scaled = rope_inverse_frequencies(RopeFrequencies(base, scaling), rotary_dim);
  ASSERT_EQ(plain.size(), 64u);
  ASSERT_EQ(scaled.size(), 64u);
  int kept = 0, divided = 0, interpolated = 0;
  for (size_t j = 0; j < plain.size(); ++j) {
    EXPECT_EQ(plain[j], 1.0f / std::pow(base, static_cast<float>(2 * j) / 128.0f)) << j;
    const double f = plain[j], wavelen = 2 * M_PI / f;
    double want = f;
    if (wavelen > 8192.0) {
      want = f / 8.0;
      ++divided;
    } else if (wavelen >= 2048.0) {
      const double smooth = (8192.0 / wavelen - 1.0) / 3.0;
      want = (1.0 - smooth) * f / 8.0 + smooth * f;
      ++interpolated;
    } else {
      ++kept;
      EXPECT_EQ(scaled[j], plain[j]) << j;
    }
    EXPECT_NEAR(scaled[j], want, 1e-6 * want) << j;
  }
  EXPECT_GT(kept, 0);
  EXPECT_GT(divided, 0);
  EXPECT_GT(interpolated, 0);
}

// rope_forward / rope_backward with the scaling rotate by the scaled frequencies: a double
// rotation by rope_inverse_frequencies' values at each position (offset 5, as a context-parallel
// chunk), and backward undoes forward.
TEST(RopeScaling, RotatesByTheScaledFrequencies) {
  Context ctx = Context::cpu(2);
  TensorFactory make(44);
  const int64_t s = 60, groups = 2, q = 2, d = 16, width = (q + 2) * d, offset = 5;
  RopeScaling scaling;
  scaling.enabled = true;
  scaling.factor = 4.0f;
  const RopeFrequencies frequencies(500000.0f, scaling);
  const std::vector<float> inv_freq = rope_inverse_frequencies(frequencies, d);
  Tensor qkv = make.random(DType::kFloat32, {s, 1, groups, width});
  const reference::Vec before = values(qkv);
  reference::Vec want = before;
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t head = 0; head < q + 1; ++head) {
        const int64_t at0 = (t * groups + g) * width + head * d;
        for (int64_t j = 0; j < d / 2; ++j) {
          const double angle = static_cast<double>(static_cast<float>(t + offset) * inv_freq[j]);
          const double x1 = before[at0 + j], x2 = before[at0 + d / 2 + j];
          want[at0 + j] = x1 * std::cos(angle) - x2 * std::sin(angle);
          want[at0 + d / 2 + j] = x2 * std::cos(angle) + x1 * std::sin(angle);
        }
      }
    }
  }
  ops::rope_forward(ctx, qkv, d, d, frequencies, offset, false);
  EXPECT_LE(relative_error(qkv, want), 1e-6);
  // Unscaled, the slow frequencies turn by other angles: the check tells the two apart.
  Tensor unscaled = make.random(DType::kFloat32, {s, 1, groups, width});
  std::copy(before.begin(), before.end(), unscaled.data_as<float>());
  ops::rope_forward(ctx, unscaled, d, d, RopeFrequencies(500000.0f), offset, false);
  EXPECT_GT(relative_error(unscaled, want), 1e-4);
  ops::rope_backward(ctx, qkv, d, d, frequencies, offset, false);
  EXPECT_LE(relative_error(qkv, before), 1e-6) << "backward(forward(x)) = x";
}

}  // namespace
}  // namespace gpt
