// generate's MoE feed-forward (InferenceMoe) against a reference written here in double from
// Megatron-Core's definitions: sigmoid scores, the top k of scores + expert bias (the bias for the
// selection only), the unbiased scores of the selected experts renormalized and scaled, each expert's
// SwiGLU MLP ([gate; up] rows), the weighted sum plus the shared expert. A bias that moves the
// selection must change the output (it is read from the parameters), and every pair is kept
// (dropless) although the config carries a capacity factor.
#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "generate/checkpoint_moe.h"
#include "generate/inference_moe.h"
#include "gtest/gtest.h"

namespace gpt {
namespace {

constexpr int64_t kH = 8, kE = 4, kK = 2, kF = 6, kShared = 5, kRows = 7;

ModelConfig moe_config() {
  ModelConfig c;
  c.num_layers = 1;
  c.hidden_size = kH;
  c.swiglu = true;
  c.add_bias_linear = false;
  c.normalization = Normalization::kRMSNorm;
  c.moe.num_experts = kE;
  c.moe.ffn_hidden_size = kF;
  c.moe.moe_layers = {true};
  c.moe.shared_expert_size = kShared;
  c.moe.topk = kK;
  c.moe.score = RouterScore::kSigmoid;
  c.moe.topk_scaling_factor = 2.5;
  c.moe.expert_bias = true;
  c.moe.capacity_factor = 0.5;  // would drop in training; generation keeps every pair
  return c;
}

// Rows [n, out] = x [n, in] W^T with W [out, in].
std::vector<double> linear(const std::vector<double>& x, const std::vector<float>& w, int64_t in, int64_t out) {
  const int64_t n = static_cast<int64_t>(x.size()) / in;
  std::vector<double> y(static_cast<size_t>(n * out), 0.0);
  for (int64_t r = 0; r < n; ++r) {
    for (int64_t o = 0; o < out; ++o) {
      for (int64_t i = 0; i < in; ++i) y[r * out + o] += x[r * in + i] * w[o * in + i];
    }
  }
  return y;
}

// SwiGLU MLP on one row: W2 (silu(gate x) * up x), fc1 [2 ffn, h] = [gate; up].
std::vector<double> swiglu(const std::vector<double>& x, const std::vector<float>& fc1, const std::vector<float>& fc2,
                           int64_t ffn) {
  const std::vector<double> u = linear(x, fc1, kH, 2 * ffn);
  std::vector<double> act(static_cast<size_t>(ffn));
  for (int64_t i = 0; i < ffn; ++i) act[i] = u[i] / (1 + std::exp(-u[i])) * u[ffn + i];
  return linear(act, fc2, ffn, kH);
}

std::vector<double> reference(const std::map<std::string, std::vector<float>>& p, const std::vector<float>& b) {
  const std::string m = "decoder.layers.0.mlp.";
  const std::vector<float>& bias = p.at(expert_bias_name(0));
  std::vector<double> y(static_cast<size_t>(kRows * kH), 0.0);
  for (int64_t t = 0; t < kRows; ++t) {
    const std::vector<double> x(b.begin() + t * kH, b.begin() + (t + 1) * kH);
    const std::vector<double> logits = linear(x, p.at(m + "router.weight"), kH, kE);
    std::vector<double> score(kE);
    for (int64_t e = 0; e < kE; ++e) score[e] = 1 / (1 + std::exp(-logits[e]));
    std::vector<int64_t> order(kE);
    std::iota(order.begin(), order.end(), 0);
    std::stable_sort(order.begin(), order.end(),
                     [&](int64_t a, int64_t c) { return score[a] + bias[a] > score[c] + bias[c]; });
    double sum = 0;
    for (int64_t j = 0; j < kK; ++j) sum += score[order[j]];
    std::vector<double> out = swiglu(x, p.at(m + "shared_experts.linear_fc1.weight"),
                                     p.at(m + "shared_experts.linear_fc2.weight"), kShared);
    for (int64_t j = 0; j < kK; ++j) {
      const std::string e = std::to_string(order[j]);
      const double weight = score[order[j]] / (sum + 1e-20) * 2.5;
      const std::vector<double> expert = swiglu(x, p.at(m + "experts.linear_fc1.weight" + e),
                                                p.at(m + "experts.linear_fc2.weight" + e), kF);
      for (int64_t i = 0; i < kH; ++i) out[i] += weight * expert[i];
    }
    std::copy(out.begin(), out.end(), y.begin() + t * kH);
  }
  return y;
}

TEST(InferenceMoe, SigmoidBiasedTopKSharedExpertDroplessAgainstReference) {
  const ModelConfig config = moe_config();
  std::mt19937 random(3);
  std::normal_distribution<float> normal(0.0f, 0.5f);
  auto fill = [&](int64_t n) {
    std::vector<float> v(static_cast<size_t>(n));
    for (float& x : v) x = normal(random);
    return v;
  };
  std::map<std::string, std::vector<float>> params;
  const std::string m = "decoder.layers.0.mlp.";
  params[m + "router.weight"] = fill(kE * kH);
  for (int64_t e = 0; e < kE; ++e) {
    params[m + "experts.linear_fc1.weight" + std::to_string(e)] = fill(2 * kF * kH);
    params[m + "experts.linear_fc2.weight" + std::to_string(e)] = fill(kH * kF);
  }
  params[m + "shared_experts.linear_fc1.weight"] = fill(2 * kShared * kH);
  params[m + "shared_experts.linear_fc2.weight"] = fill(kH * kShared);
  std::vector<float> b = fill(kRows * kH);
  Context ctx = Context::cpu(1);
  auto weight = [&](const std::string& name, Shape shape) {
    return Tensor(params.at(name).data(), DType::kFloat32, shape, Device::kCpu);
  };
  auto run = [&]() {
    InferenceMoe moe(config, TensorSlice{}, params, ctx);
    std::vector<float> out(static_cast<size_t>(kRows * kH));
    moe.forward(0, Tensor(b.data(), DType::kFloat32, Shape{kRows, kH}, Device::kCpu),
                Tensor(out.data(), DType::kFloat32, Shape{kRows, kH}, Device::kCpu), weight);
    return out;
  };
  // A zero bias, then one that favours expert 3 and disfavours expert 0 (changing selections).
  std::vector<std::vector<float>> outputs;
  for (const std::vector<float>& bias : {std::vector<float>(kE, 0.0f), std::vector<float>{-0.6f, 0.0f, 0.1f, 0.6f}}) {
    params[expert_bias_name(0)] = bias;
    const std::vector<float> out = run();
    const std::vector<double> expected = reference(params, b);
    double error = 0, norm = 0;
    for (size_t i = 0; i < out.size(); ++i) {
      error += (out[i] - expected[i]) * (out[i] - expected[i]);
      norm += expected[i] * expected[i];
    }
    EXPECT_LT(std::sqrt(error / norm), 1e-5) << "bias " << bias[0];
    outputs.push_back(out);
  }
  double moved = 0;
  for (size_t i = 0; i < outputs[0].size(); ++i) moved = std::max(moved, double{std::abs(outputs[0][i] - outputs[1][i])});
  EXPECT_GT(moved, 1e-2) << "the expert bias did not change any selection";
}

}  // namespace
}  // namespace gpt
