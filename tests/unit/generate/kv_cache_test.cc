// KvCacheAttention against the op set's causal attention (LocalAttention, what training runs): the
// same sequence fed to the cache in pieces (a prefill, single tokens, a pair) gives every query's
// output and log-sum-exp of the whole-sequence attention, with and without grouped-query attention;
// the cache keeps only the key/value groups; RoPE at an absolute position equals the op at that row.
#include <cmath>
#include <random>
#include <vector>

#include "generate/inference_model.h"
#include "generate/kv_cache_attention.h"
#include "gtest/gtest.h"
#include "kernels/ops.h"

namespace gpt {
namespace {

Tensor host(std::vector<float>& v, Shape shape) { return Tensor(v.data(), DType::kFloat32, shape, Device::kCpu); }

void check_against_local(int64_t heads, int64_t groups) {
  const int64_t s = 9, d = 8, q = heads / groups, width = (q + 2) * d;
  ModelConfig config;
  config.num_layers = 1;
  config.num_attention_heads = heads;
  config.num_query_groups = groups == heads ? 0 : groups;
  config.kv_channels = d;
  std::mt19937 random(7);
  std::normal_distribution<float> normal;
  std::vector<float> qkv(static_cast<size_t>(s * groups * width));
  for (float& x : qkv) x = normal(random);
  Context ctx = Context::cpu(1);
  const float scale = 1.0f / std::sqrt(static_cast<float>(d));
  // The whole sequence at once.
  std::vector<float> expected(static_cast<size_t>(s * heads * d)), expected_lse(static_cast<size_t>(heads * s));
  LocalAttention(scale).forward(ctx, host(expected, {s, 1, heads, d}), host(expected_lse, {1, heads, s}),
                                host(qkv, {s, 1, groups, width}), ops::DropoutMask{});
  // In pieces through the cache.
  KvCache cache(config, 2, s);
  EXPECT_EQ(cache.bytes(), static_cast<int64_t>(2 * 2 * s * groups * d * sizeof(float)));  // groups, not heads
  KvCacheAttention core(cache, 0, scale);
  core.select(1);
  int64_t start = 0;
  for (int64_t piece : {4, 1, 1, 2, 1}) {
    std::vector<float> part(qkv.begin() + start * groups * width, qkv.begin() + (start + piece) * groups * width);
    std::vector<float> out(static_cast<size_t>(piece * heads * d)), lse(static_cast<size_t>(heads * piece));
    core.forward(ctx, host(out, {piece, 1, heads, d}), host(lse, {1, heads, piece}), host(part, {piece, 1, groups, width}),
                 ops::DropoutMask{});
    cache.advance(1, piece);
    for (int64_t t = 0; t < piece; ++t) {
      for (int64_t h = 0; h < heads; ++h) {
        for (int64_t e = 0; e < d; ++e) {
          EXPECT_NEAR(out[(t * heads + h) * d + e], expected[((start + t) * heads + h) * d + e], 1e-5)
              << "position " << start + t << " head " << h;
        }
        EXPECT_NEAR(lse[h * piece + t], expected_lse[h * s + start + t], 1e-5);
      }
    }
    start += piece;
  }
  EXPECT_EQ(cache.length(1), s);
  EXPECT_EQ(cache.length(0), 0);
}

TEST(KvCacheAttention, PiecesEqualTheWholeSequence) { check_against_local(4, 4); }
TEST(KvCacheAttention, GroupedQueryAttention) { check_against_local(8, 2); }

TEST(KvCacheAttention, RopeAtAPositionEqualsTheOpAtThatRow) {
  const int64_t s = 6, groups = 2, q = 2, d = 8, width = (q + 2) * d;
  std::mt19937 random(3);
  std::normal_distribution<float> normal;
  std::vector<float> qkv(static_cast<size_t>(s * groups * width));
  for (float& x : qkv) x = normal(random);
  Context ctx = Context::cpu(1);
  for (bool interleaved : {false, true}) {  // --rotary-interleaved too
    std::vector<float> rotated = qkv;
    ops::rope_forward(ctx, host(rotated, {s, 1, groups, width}), d, 6, 500.0f, 0, interleaved);
    for (int64_t t = 0; t < s; ++t) {
      std::vector<float> row(qkv.begin() + t * groups * width, qkv.begin() + (t + 1) * groups * width);
      rope_at_position(row.data(), groups, q, d, 6, 500.0f, t, interleaved);
      for (int64_t i = 0; i < groups * width; ++i) {
        EXPECT_EQ(row[i], rotated[t * groups * width + i]) << interleaved << " " << t << " " << i;
      }
    }
  }
}

}  // namespace
}  // namespace gpt
