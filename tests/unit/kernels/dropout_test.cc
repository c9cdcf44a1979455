#include <cmath>
#include <cstring>
#include <tuple>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"
#include "unit/kernels/reference.h"

namespace gpt {
namespace {
using namespace testing_util;

const DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

ops::DropoutMask mask_of(float probability, int64_t sample_offset, int64_t row_offset) {
  return {.probability = probability,
          .key = ops::dropout_key(1234, 17, 3, ops::DropoutSite::kMlpOutput),
          .sample_offset = sample_offset,
          .row_offset = row_offset};
}

// Whether element (t, i, c) of an [s_l, b, h] tensor is kept, from the documented coordinates:
// sample = sample_offset + i, position = (row_offset + t) * h + c.
bool kept(const ops::DropoutMask& mask, int64_t t, int64_t i, int64_t c, int64_t h) {
  return ops::dropout_keeps(mask.key, static_cast<uint64_t>(mask.sample_offset + i),
                            static_cast<uint64_t>((mask.row_offset + t) * h + c), ops::dropout_threshold(mask.probability));
}

// The value of float v rounded to the storage type.
double stored(DType dtype, float v) {
  return dtype == DType::kFloat32 ? v : dtype == DType::kFloat16 ? round_to_fp16(v) : round_to_bf16(v);
}

TEST(Dropout, MaskIsDropoutKeepsAtTheGlobalCoordinates) {
  Context ctx = Context::cpu(1);
  TensorFactory make(51);
  for (DType t : kTypes) {
    // h = 37: not a multiple of 4 (positions of a row straddle Philox blocks); s_l = 1 included.
    for (auto [s, b, h] : {std::tuple{5, 3, 37}, std::tuple{1, 1, 8}, std::tuple{4, 2, 64}}) {
      SCOPED_TRACE(::testing::Message() << dtype_name(t) << " s=" << s << " b=" << b << " h=" << h);
      const ops::DropoutMask mask = mask_of(0.3f, 4, 11);
      const float scale = 1.0f / (1.0f - 0.3f);
      Tensor x = make.random(t, {s, b, h}), bias = make.random(t, {h}), out = make.poisoned(t, {s, b, h});
      ops::dropout_forward(ctx, out, x, bias, mask);
      int64_t dropped = 0;
      for (int64_t ti = 0; ti < s; ++ti) {
        for (int64_t i = 0; i < b; ++i) {
          for (int64_t c = 0; c < h; ++c) {
            const int64_t e = (ti * b + i) * h + c;
            const float sum = static_cast<float>(at(x, e)) + static_cast<float>(at(bias, c));
            const double want = kept(mask, ti, i, c, h) ? stored(t, sum * scale) : 0.0;
            ASSERT_EQ(at(out, e), want) << "t=" << ti << " i=" << i << " c=" << c;
            dropped += want == 0.0;
          }
        }
      }
      if (s * b * h > 100) EXPECT_GT(dropped, 0);
      // Backward: the same mask, dy scaled; dx written over dy.
      Tensor dy = make.random(t, {s, b, h});
      const reference::Vec g = values(dy);
      ops::dropout_backward(ctx, dy, dy, mask);
      for (int64_t e = 0; e < s * b * h; ++e) {
        const int64_t c = e % h, i = (e / h) % b, ti = e / (h * b);
        ASSERT_EQ(at(dy, e), kept(mask, ti, i, c, h) ? stored(t, static_cast<float>(g[e]) * scale) : 0.0) << e;
      }
      // Forward in place (out aliasing x), without a bias.
      const reference::Vec before = values(x);
      ops::dropout_forward(ctx, x, x, Tensor(), mask);
      for (int64_t e = 0; e < s * b * h; ++e) {
        const int64_t c = e % h, i = (e / h) % b, ti = e / (h * b);
        ASSERT_EQ(at(x, e), kept(mask, ti, i, c, h) ? stored(t, static_cast<float>(before[e]) * scale) : 0.0) << e;
      }
    }
  }
}

TEST(Dropout, KeptFractionAndScaleOnALargeTensor) {
  Context ctx = Context::cpu(1);
  TensorFactory make(52);
  for (DType t : kTypes) {
    for (float p : {0.1f, 0.5f}) {
      const int64_t s = 64, b = 4, h = 1024, n = s * b * h;
      Tensor ones = make.poisoned(t, {s, b, h}), out = make.poisoned(t, {s, b, h});
      for (int64_t e = 0; e < n; ++e) TensorFactory::set(ones, e, 1.0);
      ops::dropout_forward(ctx, out, ones, Tensor(), mask_of(p, 0, 0));
      const double scaled = stored(t, 1.0f / (1.0f - p));
      int64_t kept_count = 0;
      for (int64_t e = 0; e < n; ++e) {
        const double v = at(out, e);
        ASSERT_TRUE(v == 0.0 || v == scaled) << e << ": " << v;
        kept_count += v != 0.0;
      }
      // 5 standard deviations of the binomial fraction.
      const double fraction = static_cast<double>(kept_count) / static_cast<double>(n);
      EXPECT_NEAR(fraction, 1.0 - p, 5 * std::sqrt(p * (1 - p) / static_cast<double>(n))) << "p=" << p;
    }
  }
}

TEST(Dropout, ShardsOfTheSequenceAndTheBatchDropTheSameElements) {
  // The full [s, b, h] tensor against its sequence-parallel halves (row_offset) and its batch
  // halves (sample_offset): the layout does not change the mask.
  Context ctx = Context::cpu(1);
  TensorFactory make(53);
  const int64_t s = 6, b = 4, h = 13;
  Tensor x = make.random(DType::kFloat32, {s, b, h}), full = make.poisoned(DType::kFloat32, {s, b, h});
  ops::dropout_forward(ctx, full, x, Tensor(), mask_of(0.4f, 8, 0));
  for (int64_t half = 0; half < 2; ++half) {
    Tensor shard = x.slice(half * s / 2, (half + 1) * s / 2), out = make.poisoned(DType::kFloat32, {s / 2, b, h});
    ops::dropout_forward(ctx, out, shard, Tensor(), mask_of(0.4f, 8, half * s / 2));
    EXPECT_EQ(std::memcmp(out.data(), full.slice(half * s / 2, (half + 1) * s / 2).data(), out.bytes()), 0) << half;
    Tensor samples = make.poisoned(DType::kFloat32, {s, b / 2, h}), dropped = make.poisoned(DType::kFloat32, {s, b / 2, h});
    for (int64_t t = 0; t < s; ++t) {
      std::memcpy(samples.data_as<float>() + t * (b / 2) * h, x.data_as<float>() + (t * b + half * b / 2) * h,
                  (b / 2) * h * sizeof(float));
    }
    ops::dropout_forward(ctx, dropped, samples, Tensor(), mask_of(0.4f, 8 + half * b / 2, 0));
    for (int64_t t = 0; t < s; ++t) {
      EXPECT_EQ(std::memcmp(dropped.data_as<float>() + t * (b / 2) * h, full.data_as<float>() + (t * b + half * b / 2) * h,
                            (b / 2) * h * sizeof(float)),
                0)
          << "batch half " << half << " t=" << t;
    }
  }
}

TEST(Dropout, DisabledMaskIsTheBiasAdd) {
  Context ctx = Context::cpu(1);
  TensorFactory make(54);
  for (DType t : kTypes) {
    const int64_t s = 3, b = 2, h = 9;
    Tensor x = make.random(t, {s, b, h}), bias = make.random(t, {h}), out = make.poisoned(t, {s, b, h});
    const ops::DropoutMask disabled = mask_of(0.0f, 0, 0);
    ASSERT_FALSE(disabled.enabled());
    reference::Vec want(values(x));
    for (int64_t e = 0; e < s * b * h; ++e) want[e] = stored(t, static_cast<float>(want[e]) + static_cast<float>(at(bias, e % h)));
    ops::dropout_forward(ctx, out, x, bias, disabled);
    EXPECT_EQ(relative_error(out, want), 0.0);
    Tensor copy = make.poisoned(t, {s, b, h});
    ops::dropout_forward(ctx, copy, x, Tensor(), disabled);
    EXPECT_EQ(relative_error(copy, values(x)), 0.0);
    ops::dropout_forward(ctx, x, x, bias, disabled);  // in place
    EXPECT_EQ(relative_error(x, want), 0.0);
    Tensor dy = make.random(t, {s, b, h}), dx = make.poisoned(t, {s, b, h});
    ops::dropout_backward(ctx, dx, dy, disabled);
    EXPECT_EQ(relative_error(dx, values(dy)), 0.0);
    ops::dropout_backward(ctx, dy, dy, disabled);
    EXPECT_EQ(relative_error(dy, values(dx)), 0.0);
  }
}

}  // namespace
}  // namespace gpt
