// The sampler: greedy is the argmax (lowest id on ties); top-k 1 and a tiny top-p are greedy; the
// draws follow softmax(logits / T) renormalized over the kept tokens; the same (seed, sequence,
// step) gives the same token, and the draws do not depend on the call order.
#include <cmath>
#include <vector>

#include "generate/sampler.h"
#include "gtest/gtest.h"

namespace gpt {
namespace {

TEST(Sampler, GreedyAndDegenerateCuts) {
  const std::vector<float> logits = {0.1f, 2.0f, -1.0f, 2.0f, 0.5f};
  Sampler greedy({.greedy = true});
  EXPECT_EQ(greedy.next(logits, 0, 0), 1);
  Sampler zero_temperature({.temperature = 0.0f});
  EXPECT_EQ(zero_temperature.next(logits, 0, 0), 1);
  Sampler top1({.temperature = 5.0f, .top_k = 1});
  Sampler tiny_p({.temperature = 5.0f, .top_p = 1e-6f});
  for (int64_t step = 0; step < 50; ++step) {
    EXPECT_EQ(top1.next(logits, 0, step), 1);
    EXPECT_EQ(tiny_p.next(logits, 0, step), 1);
  }
}

TEST(Sampler, FrequenciesFollowTheKeptDistribution) {
  // Probabilities 0.5, 0.3, 0.15, 0.05.
  const std::vector<float> logits = {std::log(0.5f), std::log(0.3f), std::log(0.15f), std::log(0.05f)};
  struct Case {
    SamplingOptions options;
    std::vector<double> expected;
  };
  const std::vector<Case> cases = {
      {{.temperature = 1.0f}, {0.5, 0.3, 0.15, 0.05}},
      {{.temperature = 1.0f, .top_k = 2}, {0.625, 0.375, 0, 0}},
      {{.temperature = 1.0f, .top_p = 0.75f}, {0.625, 0.375, 0, 0}},   // 0.5 + 0.3 reaches 0.75
      {{.temperature = 1.0f, .top_p = 0.9f}, {0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0}},
  };
  const int draws = 40000;
  for (const Case& c : cases) {
    Sampler sampler(c.options);
    std::vector<int> counts(4, 0);
    for (int i = 0; i < draws; ++i) ++counts[static_cast<size_t>(sampler.next(logits, 3, i))];
    for (size_t t = 0; t < 4; ++t) {
      EXPECT_NEAR(counts[t] / static_cast<double>(draws), c.expected[t], 0.01)
          << "token " << t << " top_k " << c.options.top_k << " top_p " << c.options.top_p;
    }
  }
}

TEST(Sampler, SameKeySameToken) {
  std::vector<float> logits(100);
  for (size_t i = 0; i < logits.size(); ++i) logits[i] = std::sin(static_cast<float>(i));
  Sampler a({.temperature = 1.5f, .seed = 9}), b({.temperature = 1.5f, .seed = 9}), c({.temperature = 1.5f, .seed = 10});
  std::vector<int32_t> forward, backward(20), other;
  for (int64_t step = 0; step < 20; ++step) forward.push_back(a.next(logits, 2, step));
  for (int64_t step = 19; step >= 0; --step) backward[static_cast<size_t>(step)] = b.next(logits, 2, step);
  for (int64_t step = 0; step < 20; ++step) other.push_back(c.next(logits, 2, step));
  EXPECT_EQ(forward, backward);
  EXPECT_NE(forward, other);
}

}  // namespace
}  // namespace gpt
