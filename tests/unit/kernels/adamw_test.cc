#include <cmath>

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
}

}  // namespace
}  // namespace gpt
