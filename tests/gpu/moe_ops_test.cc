// The CUDA mixture-of-experts ops against the CPU backend on the same inputs (kernels/op_list.inc,
// "Mixture of experts"): the router's selections equal (both backends do the row math in double),
// weights and gradients within FP32 rounding, the statistics deterministic, the permutation in
// FP32, BF16 and FP16 on aligned and misaligned rows. Skips without a GPU.
#include <cstring>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "core/float16.h"
#include "gpu/ops_twin.h"

namespace gpt {
namespace {

using gpu_test::kTypes;
using gpu_test::OpsTest;
using gpu_test::Twin;

class MoeOpsTest : public OpsTest {
 protected:
  Twin ints(const std::vector<int32_t>& v, Shape shape) {
    Twin t{host_.allocate(DType::kInt32, shape), device_.allocate(DType::kInt32, shape)};
    std::memcpy(t.cpu.data(), v.data(), t.cpu.bytes());
    upload(t);
    return t;
  }
  // The CPU result copied over the GPU's (a later op's input: both backends then read the same).
  void share(const Twin& t) { upload(t); }
};

struct RouterCase {
  std::string name;
  int64_t experts;
  ops::RouterOptions options;
  bool bias = false;
};

std::vector<RouterCase> router_cases() {
  return {
      {"softmax top-2", 8, {.topk = 2}},
      {"softmax top-6 of 130, scaled", 130, {.topk = 6, .scaling = 2.5f}},
      {"pre-softmax top-3", 64, {.topk = 3, .pre_softmax = true}},
      {"sigmoid top-1", 16, {.topk = 1, .sigmoid = true}},
      {"sigmoid top-4 biased", 64, {.topk = 4, .sigmoid = true}, true},
      {"softmax group-limited", 64, {.topk = 4, .num_groups = 8, .group_topk = 2}},
      {"pre-softmax group-limited", 48, {.topk = 4, .pre_softmax = true, .num_groups = 4, .group_topk = 2}},
      // DeepSeek-V3's router: 256 experts in 8 groups, the top 4 groups, top-8, bias, 2.5.
      {"sigmoid 256 experts group-limited biased", 256,
       {.topk = 8, .sigmoid = true, .num_groups = 8, .group_topk = 4, .scaling = 2.5f}, true},
      {"softmax k = E", 40, {.topk = 40}},
      {"sigmoid k = E", 7, {.topk = 7, .sigmoid = true}},
  };
}

TEST_F(MoeOpsTest, RouteAndItsGradientMatchTheCpu) {
  const int64_t tokens = 1000;
  for (const RouterCase& c : router_cases()) {
    SCOPED_TRACE(c.name);
    const int64_t k = c.options.topk, experts = c.experts;
    Twin logits = make(DType::kFloat32, {tokens, experts}, 2.0f);
    Twin bias = c.bias ? make(DType::kFloat32, {experts}, 0.5f) : Twin{};
    Twin indices = output(DType::kInt32, {tokens, k}), weights = output(DType::kFloat32, {tokens, k});
    ops::moe_route(cpu_, indices.cpu, weights.cpu, logits.cpu, bias.cpu, c.options);
    ops::moe_route(*gpu_, indices.gpu, weights.gpu, logits.gpu, bias.gpu, c.options);
    EXPECT_TRUE(identical(indices)) << "selections differ";
    EXPECT_LE(error(weights), 1e-6);

    share(indices);
    Twin dweights = make(DType::kFloat32, {tokens, k});
    Twin dlogits = output(DType::kFloat32, {tokens, experts});
    ops::moe_route_backward(cpu_, dlogits.cpu, dweights.cpu, logits.cpu, indices.cpu, c.options);
    ops::moe_route_backward(*gpu_, dlogits.gpu, dweights.gpu, logits.gpu, indices.gpu, c.options);
    EXPECT_LE(error(dlogits), 1e-6);
  }
}

// Sinkhorn routing: the balanced scores, the selection and the weights as the CPU's (both in
// double), over one run and over SP-like runs, for k = 1 (sigmoid) and k > 1 (softmax); repeatable.
TEST_F(MoeOpsTest, SinkhornRouteMatchesTheCpu) {
  for (auto [tokens, experts, k, segments] : {std::tuple{512, 8, 1, 1}, std::tuple{1000, 64, 2, 2},
                                               std::tuple{768, 130, 6, 3}, std::tuple{64, 5, 5, 1}}) {
    SCOPED_TRACE(::testing::Message() << "T=" << tokens << " E=" << experts << " k=" << k << " runs=" << segments);
    Twin logits = make(DType::kFloat32, {tokens, experts}, 2.0f);
    Twin indices = output(DType::kInt32, {tokens, k}), weights = output(DType::kFloat32, {tokens, k});
    Twin balanced = output(DType::kFloat32, {tokens, experts});
    ops::moe_sinkhorn_route(cpu_, indices.cpu, weights.cpu, balanced.cpu, logits.cpu, segments);
    ops::moe_sinkhorn_route(*gpu_, indices.gpu, weights.gpu, balanced.gpu, logits.gpu, segments);
    EXPECT_LE(error(balanced), 1e-6);
    EXPECT_TRUE(identical(indices)) << "selections differ";
    EXPECT_LE(error(weights), 1e-6);
    const std::vector<uint8_t> first = download(balanced.gpu);
    ops::moe_sinkhorn_route(*gpu_, indices.gpu, weights.gpu, balanced.gpu, logits.gpu, segments);
    EXPECT_EQ(download(balanced.gpu), first);
  }
}

// Ties: equal logits everywhere pick the lowest experts on both backends.
TEST_F(MoeOpsTest, RouteTiesGoToTheLowerExpert) {
  Twin logits = output(DType::kFloat32, {64, 32});
  for (int64_t i = 0; i < logits.cpu.numel(); ++i) logits.cpu.data_as<float>()[i] = 0.25f;
  upload(logits);
  for (const ops::RouterOptions& o : {ops::RouterOptions{.topk = 3}, ops::RouterOptions{.topk = 3, .sigmoid = true},
                                      ops::RouterOptions{.topk = 4, .num_groups = 4, .group_topk = 2}}) {
    Twin indices = output(DType::kInt32, {64, o.topk}), weights = output(DType::kFloat32, {64, o.topk});
    ops::moe_route(cpu_, indices.cpu, weights.cpu, logits.cpu, Tensor(), o);
    ops::moe_route(*gpu_, indices.gpu, weights.gpu, logits.gpu, Tensor(), o);
    EXPECT_TRUE(identical(indices));
    EXPECT_EQ(indices.cpu.data_as<int32_t>()[o.topk - 1], o.topk - 1);
  }
}

TEST_F(MoeOpsTest, LoadBalancingStatisticsAndGradientMatchTheCpu) {
  const int64_t tokens = 1024;
  for (auto [experts, k] : {std::tuple{8, 2}, std::tuple{64, 6}, std::tuple{130, 1}}) {
    for (bool sigmoid : {false, true}) {
      for (int64_t groups : {1, 4, 8}) {
        SCOPED_TRACE(::testing::Message() << "E=" << experts << " k=" << k << " sigmoid=" << sigmoid << " G=" << groups);
        Twin logits = make(DType::kFloat32, {tokens, experts}, 2.0f);
        Twin sums = output(DType::kFloat32, {groups, experts}), counts = output(DType::kFloat32, {groups, experts});
        ops::moe_aux_statistics(cpu_, sums.cpu, counts.cpu, logits.cpu, k, sigmoid);
        ops::moe_aux_statistics(*gpu_, sums.gpu, counts.gpu, logits.gpu, k, sigmoid);
        EXPECT_LE(error(sums), 1e-6);
        EXPECT_TRUE(identical(counts)) << "counts differ";
        // Deterministic: a second run gives the same bits.
        const std::vector<uint8_t> first = download(sums.gpu);
        ops::moe_aux_statistics(*gpu_, sums.gpu, counts.gpu, logits.gpu, k, sigmoid);
        EXPECT_EQ(download(sums.gpu), first);

        Twin coefficients = make(DType::kFloat32, {groups, experts});
        Twin dlogits = make(DType::kFloat32, {tokens, experts}, 0.1f);
        ops::moe_aux_backward(cpu_, dlogits.cpu, logits.cpu, coefficients.cpu, sigmoid);
        ops::moe_aux_backward(*gpu_, dlogits.gpu, logits.gpu, coefficients.gpu, sigmoid);
        EXPECT_LE(error(dlogits), 1e-6);
      }
    }
  }
}

TEST_F(MoeOpsTest, ZLossMatchesTheCpu) {
  for (int64_t experts : {8, 64, 300}) {
    SCOPED_TRACE(::testing::Message() << "E=" << experts);
    Twin logits = make(DType::kFloat32, {777, experts}, 4.0f, 85.0f);  // exp of the raw logits overflows FP32
    Twin lse = output(DType::kFloat32, {777});
    ops::moe_logsumexp(cpu_, lse.cpu, logits.cpu);
    ops::moe_logsumexp(*gpu_, lse.gpu, logits.gpu);
    EXPECT_LE(error(lse), 1e-6);
    share(lse);
    Twin dlogits = make(DType::kFloat32, {777, experts}, 0.1f);
    ops::moe_z_loss_backward(cpu_, dlogits.cpu, logits.cpu, lse.cpu, 0.37f);
    ops::moe_z_loss_backward(*gpu_, dlogits.gpu, logits.gpu, lse.gpu, 0.37f);
    EXPECT_LE(error(dlogits), 1e-6);
  }
}

// A capacity-limited dispatch: destination [T, k] (-1: dropped) and source [E C] (-1: padding).
std::pair<std::vector<int32_t>, std::vector<int32_t>> dispatch(int64_t tokens, int64_t k, int64_t experts,
                                                               int64_t capacity, std::mt19937& rng) {
  std::uniform_int_distribution<int64_t> pick(0, experts - 1);
  std::vector<int32_t> destination(static_cast<size_t>(tokens * k), -1), source(static_cast<size_t>(experts * capacity), -1);
  std::vector<int64_t> filled(static_cast<size_t>(experts), 0);
  for (int64_t i = 0; i < tokens * k; ++i) {
    const int64_t e = pick(rng);
    if (filled[static_cast<size_t>(e)] == capacity) continue;
    const int64_t row = e * capacity + filled[static_cast<size_t>(e)]++;
    destination[static_cast<size_t>(i)] = static_cast<int32_t>(row);
    source[static_cast<size_t>(row)] = static_cast<int32_t>(i / k);
  }
  return {destination, source};
}

TEST_F(MoeOpsTest, PermuteCombineAndWeightGradientMatchTheCpu) {
  const int64_t tokens = 300, k = 2, experts = 8, capacity = 80, m = experts * capacity;
  const auto [destination_values, source_values] = dispatch(tokens, k, experts, capacity, rng_);
  Twin destination = ints(destination_values, {tokens, k}), source = ints(source_values, {m});
  for (DType t : kTypes) {
    for (int64_t h : {13, 64, 1024}) {
      for (int64_t offset : {0, 1}) {  // offset 1: misaligned rows, the scalar paths
        for (bool weighted : {false, true}) {
          SCOPED_TRACE(::testing::Message() << dtype_name(t) << " h=" << h << " offset=" << offset << " weighted=" << weighted);
          Twin x_all = make(t, {tokens * h + offset}), out_all = output(t, {m * h + offset});
          const Twin x = part(x_all, offset, {tokens, h}), out = part(out_all, offset, {m, h});
          Twin scale = weighted ? make(DType::kFloat32, {m}) : Twin{};
          ops::moe_permute(cpu_, out.cpu, x.cpu, source.cpu, scale.cpu);
          ops::moe_permute(*gpu_, out.gpu, x.gpu, source.gpu, scale.gpu);
          EXPECT_LE(error(out), t == DType::kFloat32 ? 1e-7 : tolerance(t)) << "permute";

          Twin rows = make(t, {m, h}), y_all = output(t, {tokens * h + offset});
          const Twin y = part(y_all, offset, {tokens, h});
          Twin weights = weighted ? make(DType::kFloat32, {tokens, k}) : Twin{};
          ops::moe_combine(cpu_, y.cpu, rows.cpu, destination.cpu, weights.cpu);
          ops::moe_combine(*gpu_, y.gpu, rows.gpu, destination.gpu, weights.gpu);
          EXPECT_LE(error(y), t == DType::kFloat32 ? 1e-6 : tolerance(t)) << "combine";

          // Both accumulate the dot products in FP32, in different orders.
          Twin dy = make(t, {tokens, h}), dweights = output(DType::kFloat32, {tokens, k});
          ops::moe_combine_weight_grad(cpu_, dweights.cpu, dy.cpu, rows.cpu, destination.cpu);
          ops::moe_combine_weight_grad(*gpu_, dweights.gpu, dy.gpu, rows.gpu, destination.gpu);
          EXPECT_LE(error(dweights), 1e-5) << "weight gradient";
        }
      }
    }
  }
}

}  // namespace
}  // namespace gpt
