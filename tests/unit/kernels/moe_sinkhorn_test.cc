// Megatron's sinkhorn routing (moe_sinkhorn_route) against the double-precision reference of
// moe_reference.cc (moe_utils.sinkhorn as written there): the balanced scores per run of rows, the
// selection from them, the weights from the logits' activation, and the weights' gradient (through
// moe_route_backward with sigmoid / pre-softmax options) against finite differences.
#include <algorithm>
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

struct SinkhornCase {
  std::string name;
  int64_t tokens, experts, k, segments;
};

std::vector<SinkhornCase> sinkhorn_cases() {
  return {{"top-1 (sigmoid weights)", 96, 6, 1, 1},
          {"top-2 (softmax weights)", 120, 8, 2, 1},
          {"top-3 over 3 runs (SP's shards)", 96, 16, 3, 3},
          {"k = E", 40, 5, 5, 2}};
}

// The activation sinkhorn's weights gather: sigmoid for k = 1, else softmax over all E.
Vec activation(const Vec& row, int64_t k) {
  if (k > 1) return moe::softmax(row);
  Vec out;
  for (double x : row) out.push_back(moe::sigmoid(x));
  return out;
}

// Logits skewed toward expert 0 (plain top-k would send it most tokens), over random noise.
Tensor skewed_logits(TensorFactory& make, int64_t tokens, int64_t experts) {
  Tensor logits = make.random(DType::kFloat32, {tokens, experts}, 1.5);
  for (int64_t t = 0; t < tokens; ++t) {
    TensorFactory::set(logits, t * experts, logits.data_as<float>()[t * experts] + 2.0);
  }
  return logits;
}

TEST(MoeSinkhorn, SelectionFromTheBalancedScoresWeightsFromTheLogits) {
  Context ctx = Context::cpu(2);
  TensorFactory make(51);
  for (const SinkhornCase& c : sinkhorn_cases()) {
    SCOPED_TRACE(c.name);
    const int64_t run = c.tokens / c.segments, e_count = c.experts, k = c.k;
    Tensor logits = skewed_logits(make, c.tokens, e_count);
    Tensor indices = make.ints({c.tokens, k}, -7, -6), weights = make.poisoned(DType::kFloat32, {c.tokens, k});
    Tensor balanced = make.poisoned(DType::kFloat32, {c.tokens, e_count});
    ops::moe_sinkhorn_route(ctx, indices, weights, balanced, logits, c.segments);
    const Vec all = values(logits);
    Vec want_balanced, want_weights;
    std::vector<int64_t> sinkhorn_load(static_cast<size_t>(e_count), 0), plain_load(sinkhorn_load);
    for (int64_t s = 0; s < c.segments; ++s) {
      const Vec part(all.begin() + s * run * e_count, all.begin() + (s + 1) * run * e_count);
      const Vec n = moe::sinkhorn(part, run, e_count);
      want_balanced.insert(want_balanced.end(), n.begin(), n.end());
      // Each column of a run sums to 1 / E (d1 is computed from the final d0; up to the 1e-8 epsilon).
      for (int64_t e = 0; e < e_count; ++e) {
        double column = 0;
        for (int64_t t = 0; t < run; ++t) column += n[static_cast<size_t>(t * e_count + e)];
        EXPECT_NEAR(column, 1.0 / static_cast<double>(e_count), 1e-6);
      }
      for (int64_t t = 0; t < run; ++t) {
        const int64_t row = s * run + t;
        const Vec scores(n.begin() + t * e_count, n.begin() + (t + 1) * e_count);
        const Vec logit_row(all.begin() + row * e_count, all.begin() + (row + 1) * e_count);
        const std::vector<int64_t> want = moe::top_k(scores, k);
        std::vector<int64_t> got;
        for (int64_t j = 0; j < k; ++j) got.push_back(indices.data_as<int32_t>()[row * k + j]);
        ASSERT_EQ(got, want) << "token " << row;
        const Vec act = activation(logit_row, k);
        for (int64_t e : want) {
          want_weights.push_back(act[static_cast<size_t>(e)]);
          ++sinkhorn_load[static_cast<size_t>(e)];
        }
        for (int64_t e : moe::top_k(logit_row, k)) ++plain_load[static_cast<size_t>(e)];
      }
    }
    EXPECT_LE(relative_error(balanced, want_balanced), 1e-6);
    EXPECT_LE(relative_error(weights, want_weights), 1e-6);
    if (k < e_count) {  // the point of sinkhorn: the skew toward expert 0 is balanced away
      EXPECT_LT(*std::max_element(sinkhorn_load.begin(), sinkhorn_load.end()),
                *std::max_element(plain_load.begin(), plain_load.end()));
    }
  }
}

// Megatron differentiates only the gathered activation (the selection is under no_grad): the
// gradient of sum_j dw_tj w_tj is moe_route_backward's with sigmoid (k = 1) or pre-softmax (k > 1).
TEST(MoeSinkhorn, WeightsGradientIsTheGatheredActivations) {
  Context ctx = Context::cpu(2);
  TensorFactory make(52);
  for (const SinkhornCase& c : sinkhorn_cases()) {
    SCOPED_TRACE(c.name);
    const int64_t tokens = c.tokens, e_count = c.experts, k = c.k;
    Tensor logits = skewed_logits(make, tokens, e_count);
    Tensor indices = make.ints({tokens, k}, 0, 1), weights = make.poisoned(DType::kFloat32, {tokens, k});
    Tensor balanced = make.poisoned(DType::kFloat32, {tokens, e_count});
    ops::moe_sinkhorn_route(ctx, indices, weights, balanced, logits, c.segments);
    Tensor dweights = make.random(DType::kFloat32, {tokens, k});
    Tensor dlogits = make.poisoned(DType::kFloat32, {tokens, e_count});
    ops::moe_route_backward(ctx, dlogits, dweights, logits, indices,
                            ops::RouterOptions{.topk = k, .sigmoid = k == 1, .pre_softmax = k > 1});
    const Vec all = values(logits), dw = values(dweights);
    Vec want;
    for (int64_t t = 0; t < tokens; ++t) {
      auto objective = [&](const Vec& row) {
        const Vec act = activation(row, k);
        double total = 0;
        for (int64_t j = 0; j < k; ++j) {
          total += dw[static_cast<size_t>(t * k + j)] * act[static_cast<size_t>(indices.data_as<int32_t>()[t * k + j])];
        }
        return total;
      };
      const Vec g = reference::numeric_gradient(objective, Vec(all.begin() + t * e_count, all.begin() + (t + 1) * e_count));
      want.insert(want.end(), g.begin(), g.end());
    }
    EXPECT_LE(relative_error(dlogits, want), 1e-6);
  }
}

TEST(MoeSinkhorn, RowsThatDoNotSplitIntoTheRunsAreRefused) {
  Context ctx = Context::cpu(1);
  TensorFactory make(53);
  Tensor logits = make.random(DType::kFloat32, {10, 4});
  Tensor indices = make.ints({10, 2}, 0, 1), weights = make.poisoned(DType::kFloat32, {10, 2});
  Tensor balanced = make.poisoned(DType::kFloat32, {10, 4});
  EXPECT_DEATH(ops::moe_sinkhorn_route(ctx, indices, weights, balanced, logits, 3), "sinkhorn top-2");
}

}  // namespace
}  // namespace gpt
