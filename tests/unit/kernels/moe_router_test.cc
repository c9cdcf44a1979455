// The mixture-of-experts router ops (moe_route and its gradient, the load-balancing statistics and
// their gradient, the z-loss) against the double-precision reference of moe_reference.cc; the
// gradients also against finite differences of that reference.
#include <cmath>
#include <string>
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

struct RouterCase {
  std::string name;
  int64_t experts;
  moe::Router router;
  bool bias = false;
};

ops::RouterOptions options_of(const moe::Router& r) {
  return {.topk = r.k, .sigmoid = r.sigmoid, .pre_softmax = r.pre_softmax, .num_groups = r.groups,
          .group_topk = r.group_topk, .scaling = static_cast<float>(r.scaling)};
}

// Every mode: both score functions, pre-softmax, k = 1, k > 1, k = E, the scaling factor, expert
// bias and group-limited selection.
std::vector<RouterCase> router_cases() {
  return {
      {"softmax top-2", 8, {.k = 2}},
      {"softmax top-2 scaled", 8, {.k = 2, .scaling = 2.5}},
      {"softmax top-1", 6, {.k = 1}},
      {"pre-softmax top-3", 8, {.k = 3, .pre_softmax = true}},
      {"pre-softmax top-3 scaled", 8, {.k = 3, .pre_softmax = true, .scaling = 0.5}},
      {"sigmoid top-1", 6, {.k = 1, .sigmoid = true}},
      {"sigmoid top-4 scaled", 16, {.k = 4, .sigmoid = true, .scaling = 2.5}},
      {"sigmoid top-4 biased", 16, {.k = 4, .sigmoid = true}, true},
      {"softmax group-limited", 16, {.k = 4, .groups = 4, .group_topk = 2}},
      {"pre-softmax group-limited", 16, {.k = 4, .pre_softmax = true, .groups = 8, .group_topk = 2}},
      {"sigmoid group-limited biased scaled", 32, {.k = 8, .sigmoid = true, .groups = 8, .group_topk = 4, .scaling = 2.5}, true},
      {"softmax k = E", 5, {.k = 5}},
      {"pre-softmax k = E", 4, {.k = 4, .pre_softmax = true}},
      {"sigmoid k = E", 5, {.k = 5, .sigmoid = true}},
  };
}

Vec row_of(const Vec& all, int64_t t, int64_t width) { return Vec(all.begin() + t * width, all.begin() + (t + 1) * width); }

std::vector<int64_t> indices_row(const Tensor& indices, int64_t t) {
  std::vector<int64_t> out;
  for (int64_t j = 0; j < indices.cols(); ++j) out.push_back(indices.data_as<int32_t>()[t * indices.cols() + j]);
  return out;
}

TEST(MoeRoute, SelectionAndWeightsMatchReferenceInEveryMode) {
  Context ctx = Context::cpu(2);
  TensorFactory make(41);
  const int64_t tokens = 150;
  for (const RouterCase& c : router_cases()) {
    SCOPED_TRACE(c.name);
    const int64_t k = c.router.k;
    Tensor logits = make.random(DType::kFloat32, {tokens, c.experts}, 2.0);
    Tensor bias = c.bias ? make.random(DType::kFloat32, {c.experts}, 0.5) : Tensor();
    Tensor indices = make.ints({tokens, k}, -7, -6), weights = make.poisoned(DType::kFloat32, {tokens, k});
    ops::moe_route(ctx, indices, weights, logits, bias, options_of(c.router));
    const Vec all = values(logits), bias_values = c.bias ? values(bias) : Vec();
    Vec want_weights;
    int differs_from_unbiased = 0;
    for (int64_t t = 0; t < tokens; ++t) {
      const std::vector<int64_t> want = moe::route_indices(row_of(all, t, c.experts), bias_values, c.router);
      ASSERT_EQ(indices_row(indices, t), want) << "token " << t;
      const Vec w = moe::route_weights(row_of(all, t, c.experts), want, c.router);
      want_weights.insert(want_weights.end(), w.begin(), w.end());
      differs_from_unbiased += want != moe::route_indices(row_of(all, t, c.experts), {}, c.router);
    }
    EXPECT_LE(relative_error(weights, want_weights), 1e-6);
    if (c.bias) EXPECT_GT(differs_from_unbiased, 0) << "the bias never changed a selection: a weak test";
  }
}

TEST(MoeRoute, BackwardMatchesFiniteDifferencesInEveryMode) {
  Context ctx = Context::cpu(2);
  TensorFactory make(42);
  const int64_t tokens = 70;
  for (const RouterCase& c : router_cases()) {
    SCOPED_TRACE(c.name);
    const int64_t k = c.router.k, experts = c.experts;
    Tensor logits = make.random(DType::kFloat32, {tokens, experts}, 2.0);
    Tensor bias = c.bias ? make.random(DType::kFloat32, {experts}, 0.5) : Tensor();
    Tensor indices = make.ints({tokens, k}, 0, 1), weights = make.poisoned(DType::kFloat32, {tokens, k});
    ops::moe_route(ctx, indices, weights, logits, bias, options_of(c.router));
    Tensor dweights = make.random(DType::kFloat32, {tokens, k});
    Tensor dlogits = make.poisoned(DType::kFloat32, {tokens, experts});
    ops::moe_route_backward(ctx, dlogits, dweights, logits, indices, options_of(c.router));
    // d/dlogits of sum_j dweights[t, j] weights[t, j], the selection held fixed.
    const Vec all = values(logits), dw = values(dweights);
    Vec want;
    for (int64_t t = 0; t < tokens; ++t) {
      const std::vector<int64_t> chosen = indices_row(indices, t);
      auto objective = [&](const Vec& row) {
        const Vec w = moe::route_weights(row, chosen, c.router);
        double total = 0;
        for (int64_t j = 0; j < k; ++j) total += dw[static_cast<size_t>(t * k + j)] * w[static_cast<size_t>(j)];
        return total;
      };
      const Vec g = reference::numeric_gradient(objective, row_of(all, t, experts));
      want.insert(want.end(), g.begin(), g.end());
    }
    EXPECT_LE(relative_error(dlogits, want), 1e-6);
  }
}

// Equal scores go to the lower expert, equal group scores to the lower group.
TEST(MoeRoute, TiesGoToTheLowerIndex) {
  Context ctx = Context::cpu(1);
  TensorFactory make(43);
  struct Tie {
    std::string name;
    Vec logits;
    moe::Router router;
    std::vector<int32_t> want;
  };
  const std::vector<Tie> ties = {
      {"softmax", {1, 3, 3, 0, 3, 3, 0, 0}, {.k = 3}, {1, 2, 4}},
      {"pre-softmax", {1, 3, 3, 0, 3, 3, 0, 0}, {.k = 2, .pre_softmax = true}, {1, 2}},
      {"sigmoid all equal", {0, 0, 0, 0, 0, 0, 0, 0}, {.k = 3, .sigmoid = true}, {0, 1, 2}},
      // Group maxima 1, 1, 5, 1: group 2, then group 0 of the three tied; experts {0, 1, 4, 5}.
      {"group scores", {0, 1, 1, 0, 5, -9, 1, 0.5}, {.k = 2, .groups = 4, .group_topk = 2}, {4, 1}},
  };
  for (const Tie& tie : ties) {
    SCOPED_TRACE(tie.name);
    const int64_t experts = static_cast<int64_t>(tie.logits.size()), k = tie.router.k;
    Tensor logits = make.poisoned(DType::kFloat32, {1, experts});
    for (int64_t e = 0; e < experts; ++e) TensorFactory::set(logits, e, tie.logits[static_cast<size_t>(e)]);
    Tensor indices = make.ints({1, k}, 0, 1), weights = make.poisoned(DType::kFloat32, {1, k});
    ops::moe_route(ctx, indices, weights, logits, Tensor(), options_of(tie.router));
    EXPECT_EQ(std::vector<int32_t>(indices.data_as<int32_t>(), indices.data_as<int32_t>() + k), tie.want);
  }
}

// The bias moves the selection but the weights are the unbiased sigmoid scores, renormalised.
TEST(MoeRoute, ExpertBiasChangesTheSelectionButNotTheWeights) {
  Context ctx = Context::cpu(1);
  TensorFactory make(44);
  Tensor logits = make.poisoned(DType::kFloat32, {1, 4}), bias = make.poisoned(DType::kFloat32, {4});
  const double l[] = {2.0, 0.0, 1.0, -1.0}, b[] = {0.0, 3.0, 0.0, 0.0};
  for (int e = 0; e < 4; ++e) {
    TensorFactory::set(logits, e, l[e]);
    TensorFactory::set(bias, e, b[e]);
  }
  Tensor indices = make.ints({1, 2}, 0, 1), weights = make.poisoned(DType::kFloat32, {1, 2});
  const ops::RouterOptions options{.topk = 2, .sigmoid = true};
  ops::moe_route(ctx, indices, weights, logits, bias, options);
  const double s0 = 1 / (1 + std::exp(-2.0)), s1 = 0.5;  // sigmoid(2), sigmoid(0)
  EXPECT_EQ(indices.data_as<int32_t>()[0], 1);
  EXPECT_EQ(indices.data_as<int32_t>()[1], 0);
  EXPECT_NEAR(weights.data_as<float>()[0], s1 / (s0 + s1), 1e-7);
  EXPECT_NEAR(weights.data_as<float>()[1], s0 / (s0 + s1), 1e-7);
  ops::moe_route(ctx, indices, weights, logits, Tensor(), options);
  EXPECT_EQ(indices.data_as<int32_t>()[0], 0);
  EXPECT_EQ(indices.data_as<int32_t>()[1], 2);
}

// Groups that do not partition the experts, or hold fewer experts than a group's score sums, are
// refused (they silently skipped experts or summed past a group's end).
TEST(MoeRoute, MalformedGroupsAreRefused) {
  Context ctx = Context::cpu(1);
  TensorFactory make(45);
  Tensor logits = make.random(DType::kFloat32, {3, 10});
  Tensor indices = make.ints({3, 4}, 0, 1), weights = make.poisoned(DType::kFloat32, {3, 4});
  EXPECT_DEATH(ops::moe_route(ctx, indices, weights, logits, Tensor(), {.topk = 4, .num_groups = 4, .group_topk = 2}),
               "MoE router groups");
  EXPECT_DEATH(ops::moe_route(ctx, indices, weights, logits, Tensor(), {.topk = 4, .num_groups = 5, .group_topk = 1}),
               "MoE router groups");
}

}  // namespace
}  // namespace gpt
