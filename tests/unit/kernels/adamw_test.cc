#include <cmath>
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"

namespace gpt {
namespace {
using namespace testing_util;

// torch.optim.AdamW's arithmetic, in double: p *= 1 - lr wd; m, v moments; p -= lr / bc1 * m /
// (sqrt(v) / sqrt(bc2) + eps); gradients scaled first (clipping).
TEST(AdamW, SeveralStepsMatchTheTextbookUpdate) {
  Context ctx = Context::cpu(1);
  TensorFactory make(50);
  const int64_t n = 1003;
  Tensor master = make.random(DType::kFloat32, {n}), m = make.random(DType::kFloat32, {n}, 0.0), v = make.random(DType::kFloat32, {n}, 0.0);
  Tensor copy = make.poisoned(DType::kBFloat16, {n});
  std::vector<double> p = values(master), mm(static_cast<size_t>(n), 0.0), vv(static_cast<size_t>(n), 0.0);
  const double lr = 1e-2, b1 = 0.9, b2 = 0.95, eps = 1e-8, wd = 0.1, grad_scale = 0.5;
  for (int step = 1; step <= 4; ++step) {
    Tensor grad = make.random(DType::kFloat32, {n});
    ops::adamw_update(ctx, {.learning_rate = static_cast<float>(lr), .beta1 = static_cast<float>(b1),
                            .beta2 = static_cast<float>(b2), .epsilon = static_cast<float>(eps),
                            .weight_decay = static_cast<float>(wd), .step = step, .grad_scale = static_cast<float>(grad_scale)},
                      master, grad, m, v, copy);
    for (int64_t i = 0; i < n; ++i) {
      const double g = at(grad, i) * grad_scale;
      mm[i] = b1 * mm[i] + (1 - b1) * g;
      vv[i] = b2 * vv[i] + (1 - b2) * g * g;
      const double denominator = std::sqrt(vv[i]) / std::sqrt(1 - std::pow(b2, step)) + eps;
      p[i] = p[i] * (1 - lr * wd) - lr / (1 - std::pow(b1, step)) * mm[i] / denominator;
    }
  }
  EXPECT_LE(relative_error(master, p), 1e-6);
  EXPECT_LE(relative_error(m, mm), 1e-6);
  EXPECT_LE(relative_error(v, vv), 1e-6);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(copy.data_as<bf16>()[i].bits, float_to_bf16_bits(master.data_as<float>()[i]));
  // An FP16 parameter copy (--fp16) is the master rounded to IEEE half.
  Tensor half = make.poisoned(DType::kFloat16, {n});
  ops::adamw_update(ctx, {.learning_rate = 1e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .epsilon = 1e-8f, .step = 5},
                    master, make.random(DType::kFloat32, {n}), m, v, half);
  for (int64_t i = 0; i < n; ++i) ASSERT_EQ(half.data_as<fp16>()[i].bits, float_to_fp16_bits(master.data_as<float>()[i]));
}

// The multi-tensor update is the per-segment update, bit for bit: segments in any order, of odd
// lengths and offsets (so views are misaligned), empty ones, gaps left untouched, weight decay on
// some; with and without the BF16 parameter copy.
TEST(AdamW, SegmentsMatchPerSegmentUpdatesBitForBit) {
  Context ctx = Context::cpu(1);
  const int64_t n = 1000;
  const std::vector<ops::AdamWSegment> segments = {{.offset = 517, .length = 300, .weight_decay = true},
                                                   {.offset = 0, .length = 1, .weight_decay = false},
                                                   {.offset = 1, .length = 510, .weight_decay = true},
                                                   {.offset = 511, .length = 0, .weight_decay = true},
                                                   {.offset = 511, .length = 6, .weight_decay = false},
                                                   {.offset = 830, .length = 170, .weight_decay = false}};
  for (bool with_copy : {true, false}) {
    TensorFactory make(51);
    Tensor master = make.random(DType::kFloat32, {n}), m = make.random(DType::kFloat32, {n}, 0.1);
    Tensor v = make.random(DType::kFloat32, {n}, 0.1);
    for (int64_t i = 0; i < n; ++i) v.data_as<float>()[i] = std::abs(v.data_as<float>()[i]);
    Tensor copy = with_copy ? make.poisoned(DType::kBFloat16, {n}) : Tensor();
    Tensor master_ref = make.copy(master), m_ref = make.copy(m), v_ref = make.copy(v);
    Tensor copy_ref = with_copy ? make.copy(copy) : Tensor();
    for (int step = 1; step <= 3; ++step) {
      Tensor grad = make.random(DType::kFloat32, {n});
      const ops::AdamWStep s{.learning_rate = 3e-3f, .beta1 = 0.9f, .beta2 = 0.95f, .epsilon = 1e-8f,
                             .weight_decay = 0.1f, .step = step, .grad_scale = 0.7f};
      ops::adamw_update_segments(ctx, s, master, grad, m, v, copy, segments);
      for (const ops::AdamWSegment& segment : segments) {
        ops::AdamWStep one = s;
        one.weight_decay = segment.weight_decay ? s.weight_decay : 0.0f;
        auto range = [&](const Tensor& t) { return t.defined() ? t.flat_range(segment.offset, segment.length) : Tensor(); };
        ops::adamw_update(ctx, one, range(master_ref), range(grad), range(m_ref), range(v_ref), range(copy_ref));
      }
    }
    EXPECT_EQ(std::memcmp(master.data(), master_ref.data(), master.bytes()), 0);
    EXPECT_EQ(std::memcmp(m.data(), m_ref.data(), m.bytes()), 0);
    EXPECT_EQ(std::memcmp(v.data(), v_ref.data(), v.bytes()), 0);
    if (with_copy) {
      // Everything but the gap [817, 830) is written; the gap keeps its poison.
      EXPECT_EQ(std::memcmp(copy.data(), copy_ref.data(), copy.bytes()), 0);
      EXPECT_TRUE(std::isnan(at(copy, 820)));
      EXPECT_FALSE(std::isnan(at(copy, 0)));
    }
  }
}

TEST(AdamW, SegmentsOutsideTheTensorsOrOverlappingAreRefused) {
  Context ctx = Context::cpu(1);
  TensorFactory make(52);
  Tensor p = make.random(DType::kFloat32, {10}), g = make.random(DType::kFloat32, {10});
  Tensor m = make.random(DType::kFloat32, {10}), v = make.random(DType::kFloat32, {10});
  const std::vector<ops::AdamWSegment> outside = {{.offset = 5, .length = 6}};
  EXPECT_DEATH(ops::adamw_update_segments(ctx, {.learning_rate = 1e-3f}, p, g, m, v, Tensor(), outside), "outside");
  const std::vector<ops::AdamWSegment> overlapping = {{.offset = 4, .length = 3}, {.offset = 0, .length = 5}};
  EXPECT_DEATH(ops::adamw_update_segments(ctx, {.learning_rate = 1e-3f}, p, g, m, v, Tensor(), overlapping), "overlap");
}

}  // namespace
}  // namespace gpt
