#include <cstring>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"
#include "unit/kernels/reference.h"

namespace gpt {
namespace {
using namespace testing_util;

const DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

TEST(CrossEntropyReference, BackwardMatchesFiniteDifferences) {
  TensorFactory make(40);
  const int64_t rows = 3, cols = 9, valid = 7;
  const reference::Vec logits = values(make.random(DType::kFloat32, {rows, cols}));
  const std::vector<int32_t> targets = {0, 6, 3};
  auto objective = [&](const reference::Vec& z) {
    double total = 0;
    for (double l : reference::cross_entropy(z, targets, rows, cols, valid)) total += 0.5 * l;
    return total;
  };
  EXPECT_LE(relative_error(reference::cross_entropy_backward(logits, targets, rows, cols, valid, 0.5),
                           reference::numeric_gradient(objective, logits)),
            1e-7);
}

TEST(CrossEntropy, OneShardStatsLossAndInPlaceGradientWithPadding) {
  Context ctx = Context::cpu(1);
  TensorFactory make(41);
  for (DType t : kTypes) {
    const int64_t rows = 23, cols = 101, valid = 90;
    Tensor logits = make.random(t, {rows, cols}, 3.0), targets = make.ints({rows}, 0, valid);
    std::vector<int32_t> target_ids(targets.data_as<int32_t>(), targets.data_as<int32_t>() + rows);
    const reference::Vec loss_want = reference::cross_entropy(values(logits), target_ids, rows, cols, valid);
    const reference::Vec grad_want = reference::cross_entropy_backward(values(logits), target_ids, rows, cols, valid, 0.25);
    Tensor row_max = make.poisoned(DType::kFloat32, {rows}), sums = make.poisoned(DType::kFloat32, {rows});
    Tensor target = make.poisoned(DType::kFloat32, {rows}), loss = make.poisoned(DType::kFloat32, {rows});
    ops::cross_entropy_stats(ctx, row_max, sums, target, logits, targets, 0, valid);
    ops::cross_entropy_loss(ctx, loss, row_max, sums, target);
    EXPECT_LE(relative_error(loss, loss_want), 1e-6);
    ops::cross_entropy_backward(ctx, logits, logits, targets, row_max, sums, 0.25f, 0, valid);  // in place
    EXPECT_LE(relative_error(logits, grad_want), tolerance(t));
    for (int64_t r = 0; r < rows; ++r) {
      for (int64_t j = valid; j < cols; ++j) ASSERT_EQ(at(logits, r * cols + j), 0.0) << "padding column";
    }
  }
}

// Two vocabulary shards combined as tensor parallelism does (common maximum, rescaled sums, summed
// target logits) give the single-shard loss.
TEST(CrossEntropy, TwoShardsCombineToTheWholeVocabularyLoss) {
  Context ctx = Context::cpu(1);
  TensorFactory make(42);
  const int64_t rows = 17, shard = 40, valid_total = 71;  // second shard: 31 valid, 9 padding
  Tensor whole = make.random(DType::kFloat32, {rows, 2 * shard}, 2.0), targets = make.ints({rows}, 0, valid_total);
  std::vector<int32_t> target_ids(targets.data_as<int32_t>(), targets.data_as<int32_t>() + rows);
  const reference::Vec want = reference::cross_entropy(values(whole), target_ids, rows, 2 * shard, valid_total);
  Tensor maxima[2], sums[2], target_logits[2];
  for (int s = 0; s < 2; ++s) {
    Tensor part = make.poisoned(DType::kFloat32, {rows, shard});
    for (int64_t r = 0; r < rows; ++r) {
      std::memcpy(part.data_as<float>() + r * shard, whole.data_as<float>() + r * 2 * shard + s * shard, shard * 4);
    }
    maxima[s] = make.poisoned(DType::kFloat32, {rows});
    sums[s] = make.poisoned(DType::kFloat32, {rows});
    target_logits[s] = make.poisoned(DType::kFloat32, {rows});
    ops::cross_entropy_stats(ctx, maxima[s], sums[s], target_logits[s], part, targets, s * shard,
                             s == 0 ? shard : valid_total - shard);
  }
  Tensor global = make.poisoned(DType::kFloat32, {rows}), total_sum = make.poisoned(DType::kFloat32, {rows});
  Tensor total_target = make.poisoned(DType::kFloat32, {rows}), loss = make.poisoned(DType::kFloat32, {rows});
  for (int64_t r = 0; r < rows; ++r) global.data_as<float>()[r] = std::max(at(maxima[0], r), at(maxima[1], r));
  for (int s = 0; s < 2; ++s) ops::cross_entropy_rescale(ctx, sums[s], maxima[s], global);
  for (int64_t r = 0; r < rows; ++r) {
    total_sum.data_as<float>()[r] = sums[0].data_as<float>()[r] + sums[1].data_as<float>()[r];
    total_target.data_as<float>()[r] = target_logits[0].data_as<float>()[r] + target_logits[1].data_as<float>()[r];
  }
  ops::cross_entropy_loss(ctx, loss, global, total_sum, total_target);
  EXPECT_LE(relative_error(loss, want), 1e-6);
}

}  // namespace
}  // namespace gpt
