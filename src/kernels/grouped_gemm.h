// The groups of grouped_matmul and grouped_matmul_weight_grad (kernels/op_list.inc) as the per-group
// matmul each stands for: views of the group's rows, its options and its checked shape. Both
// backends and the dispatch's checks start from these.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "kernels/gemm_shape.h"
#include "kernels/ops.h"

namespace gpt {

struct GemmGroup {
  int64_t first_row = 0;  // of the row-split operands
  int64_t rows = 0;       // > 0
  Tensor out, a, b;       // matmul(out, a, b, options) is this group's GEMM
  ops::MatmulOptions options;
  GemmShape shape{};
};

// out_g = a_g op(b[g]) (+ epilogue) for every group with rows; fatal (naming the group) on a shape,
// dtype or count mismatch.
std::vector<GemmGroup> grouped_matmul_groups(const Tensor& out, const Tensor& a, std::span<const Tensor> b,
                                             std::span<const int64_t> group_rows,
                                             const ops::GroupedMatmulOptions& options);

// out[g] += dy_g^T x_g (transpose_a, beta 1) for every group with rows; fatal on a mismatch.
std::vector<GemmGroup> grouped_weight_grad_groups(std::span<const Tensor> out, const Tensor& dy, const Tensor& x,
                                                  std::span<const int64_t> group_rows);

}  // namespace gpt
