#include <cmath>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"
#include "unit/kernels/reference.h"

namespace gpt {
namespace {
using namespace testing_util;

const DType kTypes[] = {DType::kFloat32, DType::kBFloat16};

TEST(AttentionReference, BackwardMatchesFiniteDifferences) {
  TensorFactory make(20);
  const int64_t s = 4, b = 2, heads = 2, d = 3;
  const double scale = 0.6;
  const reference::Vec qkv = values(make.random(DType::kFloat32, {s, b, heads, 3 * d}));
  const reference::Vec dout = values(make.random(DType::kFloat32, {s, b, heads, d}));
  auto objective = [&](const reference::Vec& input) {
    reference::Vec out, lse;
    reference::attention(input, s, b, heads, d, scale, out, lse);
    double total = 0;
    for (size_t i = 0; i < out.size(); ++i) total += dout[i] * out[i];
    return total;
  };
  EXPECT_LE(relative_error(reference::attention_backward(qkv, dout, s, b, heads, d, scale),
                           reference::numeric_gradient(objective, qkv)),
            1e-7);
}

TEST(Attention, ForwardAndBackwardAgainstDoubleReference) {
  Context ctx = Context::cpu(1);
  TensorFactory make(21);
  for (DType t : kTypes) {
    for (auto [s, b, heads, d] : {std::tuple{1, 1, 1, 8}, std::tuple{17, 2, 3, 16}, std::tuple{64, 1, 2, 32}}) {
      const double scale = 1.0 / std::sqrt(static_cast<double>(d));
      Tensor qkv = make.random(t, {s, b, heads, 3 * d});
      Tensor out = make.poisoned(t, {s, b, heads, d}), lse = make.poisoned(DType::kFloat32, {b, heads, s});
      ops::attention_forward(ctx, out, lse, qkv, static_cast<float>(scale));
      reference::Vec out_want, lse_want;
      reference::attention(values(qkv), s, b, heads, d, scale, out_want, lse_want);
      EXPECT_LE(relative_error(out, out_want), tolerance(t)) << "s=" << s;
      EXPECT_LE(relative_error(lse, lse_want), 1e-6);
      Tensor dout = make.random(t, {s, b, heads, d}), dqkv = make.poisoned(t, {s, b, heads, 3 * d});
      ops::attention_backward(ctx, dqkv, dout, qkv, out, lse, static_cast<float>(scale));
      const reference::Vec dqkv_want = reference::attention_backward(values(qkv), values(dout), s, b, heads, d, scale);
      EXPECT_LE(relative_error(dqkv, dqkv_want), t == DType::kBFloat16 ? 2e-2 : 1e-5) << "s=" << s;
    }
  }
}

}  // namespace
}  // namespace gpt
