// The mixture-of-experts load-balancing statistics and their gradient, and the z-loss's logsumexp
// and gradient, against the double-precision reference of moe_reference.cc and finite differences.
#include <cmath>
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

Vec row_of(const Vec& all, int64_t t, int64_t width) { return Vec(all.begin() + t * width, all.begin() + (t + 1) * width); }

TEST(MoeAuxStatistics, SumsAndCountsPerGroupMatchReference) {
  Context ctx = Context::cpu(2);
  TensorFactory make(51);
  const int64_t tokens = 24, experts = 8, k = 2;
  for (bool sigmoid : {false, true}) {
    for (int64_t groups : {1, 3, 4}) {
      SCOPED_TRACE(::testing::Message() << (sigmoid ? "sigmoid" : "softmax") << " groups=" << groups);
      Tensor logits = make.random(DType::kFloat32, {tokens, experts}, 2.0);
      // Row 5: ties (experts 2, 3 and 6 share the largest logit): the lower two are counted.
      for (int64_t e = 0; e < experts; ++e) TensorFactory::set(logits, 5 * experts + e, e == 2 || e == 3 || e == 6 ? 1.5 : -1.0);
      Tensor sums = make.poisoned(DType::kFloat32, {groups, experts}), counts = make.poisoned(DType::kFloat32, {groups, experts});
      ops::moe_aux_statistics(ctx, sums, counts, logits, k, sigmoid);
      const Vec all = values(logits);
      Vec want_sums(static_cast<size_t>(groups * experts), 0.0), want_counts(want_sums.size(), 0.0);
      for (int64_t t = 0; t < tokens; ++t) {
        const Vec s = moe::aux_scores(row_of(all, t, experts), sigmoid);
        const int64_t g = t % groups;
        for (int64_t e = 0; e < experts; ++e) want_sums[static_cast<size_t>(g * experts + e)] += s[static_cast<size_t>(e)];
        for (int64_t e : moe::top_k(s, k)) want_counts[static_cast<size_t>(g * experts + e)] += 1;
      }
      EXPECT_LE(relative_error(sums, want_sums), 1e-6);
      EXPECT_EQ(values(counts), want_counts);
      const int64_t g5 = 5 % groups;
      EXPECT_GE(at(counts, g5 * experts + 2), 1);
      EXPECT_GE(at(counts, g5 * experts + 3), 1);
    }
  }
}

TEST(MoeAuxBackward, AddsTheGradientOfTheWeightedScores) {
  Context ctx = Context::cpu(2);
  TensorFactory make(52);
  const int64_t tokens = 90, experts = 12;
  for (bool sigmoid : {false, true}) {
    for (int64_t groups : {1, 3}) {
      SCOPED_TRACE(::testing::Message() << (sigmoid ? "sigmoid" : "softmax") << " groups=" << groups);
      Tensor logits = make.random(DType::kFloat32, {tokens, experts}, 2.0);
      Tensor coefficients = make.random(DType::kFloat32, {groups, experts});
      Tensor dlogits = make.random(DType::kFloat32, {tokens, experts}, 0.1);
      const Vec before = values(dlogits), all = values(logits), c = values(coefficients);
      ops::moe_aux_backward(ctx, dlogits, logits, coefficients, sigmoid);
      // before + d/dlogits of sum_t sum_e c[t % G, e] s[t, e].
      Vec want;
      for (int64_t t = 0; t < tokens; ++t) {
        auto objective = [&](const Vec& row) {
          const Vec s = moe::aux_scores(row, sigmoid);
          double total = 0;
          for (int64_t e = 0; e < experts; ++e) total += c[static_cast<size_t>((t % groups) * experts + e)] * s[static_cast<size_t>(e)];
          return total;
        };
        const Vec g = reference::numeric_gradient(objective, row_of(all, t, experts));
        for (int64_t e = 0; e < experts; ++e) want.push_back(before[static_cast<size_t>(t * experts + e)] + g[static_cast<size_t>(e)]);
      }
      EXPECT_LE(relative_error(dlogits, want), 1e-6);
    }
  }
}

TEST(MoeZLoss, LogsumexpAndItsGradient) {
  Context ctx = Context::cpu(2);
  TensorFactory make(53);
  const int64_t tokens = 40, experts = 16;
  Tensor logits = make.random(DType::kFloat32, {tokens, experts}, 3.0);
  // Row 0 past FP32 exp's range: only a max-subtracted logsumexp stays finite.
  for (int64_t e = 0; e < experts; ++e) TensorFactory::set(logits, e, 100.0 + e);
  Tensor lse = make.poisoned(DType::kFloat32, {tokens});
  ops::moe_logsumexp(ctx, lse, logits);
  const Vec all = values(logits);
  Vec want_lse;
  for (int64_t t = 0; t < tokens; ++t) want_lse.push_back(moe::logsumexp(row_of(all, t, experts)));
  EXPECT_LE(relative_error(lse, want_lse), 1e-6);

  const float scale = 0.37f;
  Tensor dlogits = make.random(DType::kFloat32, {tokens, experts}, 0.1);
  const Vec before = values(dlogits);
  ops::moe_z_loss_backward(ctx, dlogits, logits, lse, scale);
  // before + d/dlogits of (scale / 2) sum_t lse_t^2.
  Vec want;
  for (int64_t t = 0; t < tokens; ++t) {
    auto objective = [&](const Vec& row) { return 0.5 * scale * std::pow(moe::logsumexp(row), 2); };
    const Vec g = reference::numeric_gradient(objective, row_of(all, t, experts), 1e-5);
    for (int64_t e = 0; e < experts; ++e) want.push_back(before[static_cast<size_t>(t * experts + e)] + g[static_cast<size_t>(e)]);
  }
  EXPECT_LE(relative_error(dlogits, want), 1e-6);
}

// A logsumexp of the wrong length is refused (it was read past its end).
TEST(MoeZLoss, MismatchedLogsumexpIsRefused) {
  Context ctx = Context::cpu(1);
  TensorFactory make(54);
  Tensor logits = make.random(DType::kFloat32, {6, 4}), dlogits = make.random(DType::kFloat32, {6, 4});
  EXPECT_DEATH(ops::moe_z_loss_backward(ctx, dlogits, logits, make.random(DType::kFloat32, {3}), 1.0f), "MoE logsumexp");
}

}  // namespace
}  // namespace gpt
