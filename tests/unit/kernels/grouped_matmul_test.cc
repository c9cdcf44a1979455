// grouped_matmul and grouped_matmul_weight_grad against one matmul per group (the per-expert loop
// they replace in model/moe_block.cc): bit-identical, with empty groups first, inside and last, on
// several threads (blocks of a group's rows on different threads); and against the double
// reference once.
#include <cstring>
#include <vector>

#include "gtest/gtest.h"
#include "kernels/ops.h"
#include "unit/kernels/kernel_test_util.h"
#include "unit/kernels/reference.h"

namespace gpt {
namespace {
using namespace testing_util;

// Rows of t as a matrix.
Tensor rows_of(const Tensor& t, int64_t first, int64_t count) { return t.as_matrix().slice(first, first + count); }

bool same_bits(const Tensor& a, const Tensor& b) {
  return a.bytes() == b.bytes() && std::memcmp(a.data(), b.data(), a.bytes()) == 0;
}

// Empty groups first, inside and last; one group; fewer and more groups than threads; groups at
// and past OpenBLAS's threshold for threading a GEMM (64 x 64 x 64 = 262144) when m > 400.
const std::vector<int64_t> kGroupRows[] = {{0, 37, 0, 90, 1, 0}, {200}, {5, 0, 64, 3}, {0, 0},
                                           {0, 300, 64, 65, 140, 0}};

TEST(MoeGroupedMatmul, ForwardAndInputGradientMatchMatmulPerGroup) {
  for (int threads : {1, 2, 4}) {
    Context ctx = Context::cpu(threads);
    TensorFactory make(7);
    for (DType t : {DType::kFloat32, DType::kBFloat16}) {
      for (const std::vector<int64_t>& group_rows : kGroupRows) {
        int64_t m = 0;
        for (int64_t r : group_rows) m += r;
        const int64_t k = m > 400 ? 64 : 24, n = m > 400 ? 64 : 40;
        const auto groups = static_cast<int64_t>(group_rows.size());
        for (bool transpose_b : {false, true}) {
          for (int epilogue = 0; epilogue < 3; ++epilogue) {  // none, bias, bias and GeLU
            Tensor a = make.random(t, {m, k});
            std::vector<Tensor> b, bias;
            for (int64_t g = 0; g < groups; ++g) {
              b.push_back(make.random(t, transpose_b ? Shape({n, k}) : Shape({k, n})));
              bias.push_back(epilogue > 0 ? make.random(t, {n}) : Tensor());
            }
            Tensor want = make.poisoned(t, {m, n}), want_pre = make.poisoned(t, {m, n});
            Tensor got = make.poisoned(t, {m, n}), got_pre = make.poisoned(t, {m, n});
            int64_t first = 0;
            for (int64_t g = 0; g < groups; ++g) {
              const int64_t rows = group_rows[static_cast<size_t>(g)];
              if (rows > 0) {
                ops::MatmulOptions o{.transpose_b = transpose_b, .bias = bias[static_cast<size_t>(g)]};
                if (epilogue == 2) o.pre_gelu = rows_of(want_pre, first, rows);
                ops::matmul(ctx, rows_of(want, first, rows), rows_of(a, first, rows), b[static_cast<size_t>(g)], o);
              }
              first += rows;
            }
            ops::grouped_matmul(ctx, got, a, b, group_rows,
                                {.transpose_b = transpose_b,
                                 .bias = epilogue > 0 ? std::span<const Tensor>(bias) : std::span<const Tensor>(),
                                 .pre_gelu = epilogue == 2 ? got_pre : Tensor()});
            const std::string what = "threads " + std::to_string(threads) + " " + std::string(dtype_name(t)) + " m " +
                                     std::to_string(m) + " tb " + std::to_string(transpose_b) + " epilogue " +
                                     std::to_string(epilogue);
            EXPECT_TRUE(same_bits(got, want)) << what;
            if (epilogue == 2) EXPECT_TRUE(same_bits(got_pre, want_pre)) << what;
          }
        }
      }
    }
  }
}

TEST(MoeGroupedMatmul, WeightGradientAccumulatesAsMatmulPerGroup) {
  for (int threads : {1, 2, 4}) {
    Context ctx = Context::cpu(threads);
    TensorFactory make(8);
    for (DType t : {DType::kFloat32, DType::kBFloat16}) {
      for (const std::vector<int64_t>& group_rows : kGroupRows) {
        int64_t m = 0;
        for (int64_t r : group_rows) m += r;
        const int64_t n = m > 400 ? 64 : 48, k = m > 400 ? 64 : 20;
        Tensor dy = make.random(t, {m, n}), x = make.random(t, {m, k});
        std::vector<Tensor> want, got;
        for (size_t g = 0; g < group_rows.size(); ++g) {
          want.push_back(make.random(DType::kFloat32, {n, k}));
          got.push_back(make.copy(want.back()));
        }
        int64_t first = 0;
        for (size_t g = 0; g < group_rows.size(); ++g) {
          const int64_t rows = group_rows[g];
          if (rows > 0) {
            ops::matmul(ctx, want[g], rows_of(dy, first, rows), rows_of(x, first, rows),
                        {.transpose_a = true, .beta = 1.0f});
          }
          first += rows;
        }
        ops::grouped_matmul_weight_grad(ctx, got, dy, x, group_rows);
        for (size_t g = 0; g < group_rows.size(); ++g) {
          EXPECT_TRUE(same_bits(got[g], want[g])) << "threads " << threads << " " << dtype_name(t) << " group " << g;
        }
      }
    }
  }
}

TEST(MoeGroupedMatmul, AgainstDoubleReference) {
  Context ctx = Context::cpu(2);
  TensorFactory make(9);
  const std::vector<int64_t> group_rows = {30, 0, 50};
  const int64_t m = 80, k = 16, n = 12;
  Tensor a = make.random(DType::kFloat32, {m, k});
  std::vector<Tensor> b = {make.random(DType::kFloat32, {n, k}), make.random(DType::kFloat32, {n, k}),
                           make.random(DType::kFloat32, {n, k})};
  Tensor out = make.poisoned(DType::kFloat32, {m, n});
  ops::grouped_matmul(ctx, out, a, b, group_rows, {.transpose_b = true});
  const reference::Vec all = values(a);
  reference::Vec want;
  int64_t first = 0;
  for (size_t g = 0; g < group_rows.size(); ++g) {
    const int64_t rows = group_rows[g];
    const reference::Vec a_g(all.begin() + first * k, all.begin() + (first + rows) * k);
    const reference::Vec part = reference::matmul(a_g, values(b[g]), rows, n, k, false, true);
    want.insert(want.end(), part.begin(), part.end());
    first += rows;
  }
  EXPECT_LE(relative_error(out, want), 1e-6);
}

}  // namespace
}  // namespace gpt
