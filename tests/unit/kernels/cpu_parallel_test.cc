// The CPU backend's helpers: the thread pool's split and the vectorized exp; and the ops that use
// threads giving the same bits on one thread and on several.
#include <atomic>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/cpu/dropout_words.h"
#include "kernels/cpu/parallel.h"
#include "kernels/dropout_mask.h"
#include "kernels/cpu/simd.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"

namespace gpt {
namespace {
using namespace testing_util;

TEST(CpuParallelFor, CoversTheRangeOnceInContiguousPieces) {
  for (int threads : {1, 2, 3, 8}) {
    Context ctx = Context::cpu(threads);
    for (int64_t n : {0, 1, 5, 64, 1001}) {
      std::vector<std::atomic<int>> hits(static_cast<size_t>(n));
      std::atomic<int> calls{0};
      cpu::parallel_for(ctx, n, 4, [&](int64_t begin, int64_t end) {
        ASSERT_LT(begin, end);
        ++calls;
        for (int64_t i = begin; i < end; ++i) ++hits[i];
      });
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " i=" << i;
      EXPECT_LE(calls.load(), std::max(1, 8 * threads));
    }
  }
}

// Callers on several threads at once (the pool serves one; the others run inline).
TEST(CpuParallelFor, ConcurrentCallersAllComplete) {
  std::vector<std::thread> callers;
  std::atomic<int64_t> total{0};
  for (int c = 0; c < 4; ++c) {
    callers.emplace_back([&] {
      Context ctx = Context::cpu(2);
      for (int k = 0; k < 200; ++k) {
        cpu::parallel_for(ctx, 100, 1, [&](int64_t begin, int64_t end) { total += end - begin; });
      }
    });
  }
  for (std::thread& t : callers) t.join();
  EXPECT_EQ(total.load(), 4 * 200 * 100);
}

TEST(CpuSimd, ExpWithinThreeUlpOfLibm) {
  float worst = 0.0f;
  for (float x = -87.0f; x <= 88.0f; x += 0.00731f) {
    const float got = cpu::simd::exp1(x), want = std::exp(x);
    worst = std::max(worst, std::fabs(got - want) / want);
  }
  EXPECT_LE(worst, 3.0f * std::numeric_limits<float>::epsilon());
  EXPECT_EQ(cpu::simd::exp1(0.0f), 1.0f);
  EXPECT_EQ(cpu::simd::exp1(-200.0f), 0.0f);
  EXPECT_EQ(cpu::simd::exp1(-std::numeric_limits<float>::infinity()), 0.0f);
  EXPECT_TRUE(std::isnan(cpu::simd::exp1(std::nanf(""))));
}

// The 16-lane exp (cross-entropy's) gives each lane the 8-lane one's value bit for bit, so a
// logit's probability never depends on the vector width a kernel was written with.
TEST(CpuSimd, WideExpEqualsTheEightLaneExpPerLane) {
  for (float base = -100.0f; base <= 90.0f; base += 0.37f) {
    cpu::simd::f32x16 x;
    for (int i = 0; i < cpu::simd::kWideLanes; ++i) x[i] = base + 0.0173f * static_cast<float>(i);
    x[3] = std::nanf("");
    const cpu::simd::f32x16 wide = cpu::simd::exp(x);
    for (int i = 0; i < cpu::simd::kWideLanes; ++i) {
      const float want = cpu::simd::exp1(x[i]);
      if (std::isnan(want)) {
        EXPECT_TRUE(std::isnan(wide[i]));
      } else {
        ASSERT_EQ(wide[i], want) << "lane " << i << " x " << x[i];
      }
    }
  }
}

// The batched words are dropout_keeps's words: any start (also across a 2^32-block counter carry)
// and length.
TEST(CpuDropoutWords, SameBitsAsPhiloxPerElement) {
  const uint64_t key = ops::dropout_key(99, 3, 1, ops::DropoutSite::kAttentionProbabilities);
  std::vector<uint32_t> words(300);
  for (uint64_t sample : {uint64_t{0}, uint64_t{5}, uint64_t{1} << 40}) {
    for (uint64_t first : {uint64_t{0}, uint64_t{1}, uint64_t{3}, uint64_t{77}, (uint64_t{1} << 34) - 9}) {
      for (int64_t count : {1, 2, 5, 64, 65, 300}) {
        cpu::dropout_words(key, sample, first, count, words.data());
        for (int64_t k = 0; k < count; ++k) {
          const uint64_t position = first + static_cast<uint64_t>(k);
          const uint32_t want = philox4x32_10(key, sample, position / 4)[position % 4];
          ASSERT_EQ(words[k], want) << "sample " << sample << " position " << position;
        }
      }
    }
  }
}

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.numel() == b.numel() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// Row-split ops: the same bits whatever the thread count.
TEST(CpuThreads, CrossEntropyIndependentOfThreadCount) {
  TensorFactory make(71);
  for (DType t : {DType::kFloat32, DType::kBFloat16}) {
    const int64_t rows = 37, cols = 4099, valid = 4000;
    Tensor logits = make.random(t, {rows, cols}, 3.0), targets = make.ints({rows}, 0, valid);
    Tensor out[2][4];
    for (int k = 0; k < 2; ++k) {
      Context ctx = Context::cpu(k == 0 ? 1 : 2);
      for (int i = 0; i < 3; ++i) out[k][i] = make.poisoned(DType::kFloat32, {rows});
      out[k][3] = make.poisoned(t, {rows, cols});
      ops::cross_entropy_stats(ctx, out[k][0], out[k][1], out[k][2], logits, targets, 0, valid);
      ops::cross_entropy_backward(ctx, out[k][3], logits, targets, out[k][0], out[k][1], 0.5f, 0, valid);
    }
    for (int i = 0; i < 4; ++i) EXPECT_TRUE(same_bits(out[0][i], out[1][i])) << dtype_name(t) << " output " << i;
  }
}

// Attention splits (batch, group) tasks over the threads: the same bits on 1 and 2 threads, with
// grouped queries and dropout.
TEST(CpuThreads, AttentionIndependentOfThreadCount) {
  TensorFactory make(72);
  const int64_t s = 16, b = 3, groups = 2, q = 2, d = 8;
  const ops::DropoutMask mask{.probability = 0.2f,
                              .key = ops::dropout_key(5, 1, 0, ops::DropoutSite::kAttentionProbabilities)};
  Tensor qkv = make.random(DType::kFloat32, {s, b, groups, (q + 2) * d});
  Tensor dout = make.random(DType::kFloat32, {s, b, groups * q, d});
  Tensor out[2], lse[2], dqkv[2];
  for (int k = 0; k < 2; ++k) {
    Context ctx = Context::cpu(k == 0 ? 1 : 2);
    out[k] = make.poisoned(DType::kFloat32, {s, b, groups * q, d});
    lse[k] = make.poisoned(DType::kFloat32, {b, groups * q, s});
    dqkv[k] = make.poisoned(DType::kFloat32, {s, b, groups, (q + 2) * d});
    ops::attention_forward(ctx, out[k], lse[k], qkv, 0.35f, mask);
    ops::attention_backward(ctx, dqkv[k], dout, qkv, out[k], lse[k], 0.35f, mask);
  }
  EXPECT_TRUE(same_bits(out[0], out[1]));
  EXPECT_TRUE(same_bits(lse[0], lse[1]));
  EXPECT_TRUE(same_bits(dqkv[0], dqkv[1]));
}

}  // namespace
}  // namespace gpt
