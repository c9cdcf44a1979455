#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"

namespace gpt {
namespace {
using namespace testing_util;

const DType kTypes[] = {DType::kFloat32, DType::kBFloat16, DType::kFloat16};

TEST(Embedding, VocabShardLookupAndGradient) {
  Context ctx = Context::cpu(1);
  TensorFactory make(30);
  for (DType t : kTypes) {
    const int64_t rows = 41, h = 13, local_vocab = 25, start = 10;
    Tensor table = make.random(t, {local_vocab, h}), tokens = make.ints({rows}, 0, 60);  // many outside the shard
    Tensor out = make.poisoned(t, {rows, h});
    ops::embedding_forward(ctx, out, tokens, table, start);
    std::vector<double> want(static_cast<size_t>(rows * h), 0.0);
    std::vector<double> grad_want(static_cast<size_t>(local_vocab * h), 0.0);
    Tensor dout = make.random(t, {rows, h}), dtable = make.random(DType::kFloat32, {local_vocab, h});
    const std::vector<double> dtable_before = values(dtable);
    for (int64_t r = 0; r < rows; ++r) {
      const int64_t local = tokens.data_as<int32_t>()[r] - start;
      for (int64_t j = 0; j < h; ++j) {
        if (local >= 0 && local < local_vocab) {
          want[r * h + j] = at(table, local * h + j);
          grad_want[local * h + j] += at(dout, r * h + j);
        }
      }
    }
    for (size_t i = 0; i < grad_want.size(); ++i) grad_want[i] += dtable_before[i];
    EXPECT_EQ(relative_error(out, want), 0.0);
    ops::embedding_backward(ctx, dtable, dout, tokens, start);
    EXPECT_LE(relative_error(dtable, grad_want), 1e-6);
  }
}

TEST(Embedding, PositionsWithOffsetAndTheirGradient) {
  Context ctx = Context::cpu(1);
  TensorFactory make(31);
  for (DType t : kTypes) {
    const int64_t s_local = 9, b = 3, h = 7, offset = 4, max_positions = 16;
    Tensor table = make.random(t, {max_positions, h}), out = make.random(t, {s_local * b, h});
    std::vector<double> want = values(out);
    for (int64_t r = 0; r < s_local * b; ++r) {
      for (int64_t j = 0; j < h; ++j) want[r * h + j] += at(table, (offset + r / b) * h + j);
    }
    ops::position_embedding_forward(ctx, out, table, b, offset);
    EXPECT_LE(relative_error(out, want), tolerance(t));
    Tensor dtable = make.random(DType::kFloat32, {max_positions, h});
    std::vector<double> grad_want = values(dtable);
    for (int64_t r = 0; r < s_local * b; ++r) {
      for (int64_t j = 0; j < h; ++j) grad_want[(offset + r / b) * h + j] += at(out, r * h + j);
    }
    ops::position_embedding_backward(ctx, dtable, out, b, offset);
    EXPECT_LE(relative_error(dtable, grad_want), 1e-6);
  }
}

}  // namespace
}  // namespace gpt
