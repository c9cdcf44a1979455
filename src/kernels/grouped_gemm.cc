#include "kernels/grouped_gemm.h"

#include "core/check.h"

namespace gpt {
namespace {

// The total of the counts, checked against the rows they split.
void check_rows(std::span<const int64_t> group_rows, int64_t rows, const char* op) {
  int64_t total = 0;
  for (int64_t r : group_rows) {
    GPT_CHECK_GE(r, 0) << op << ": a negative group row count";
    total += r;
  }
  GPT_CHECK_EQ(total, rows) << op << ": the groups' rows do not cover the operands' rows";
}

Tensor rows_of(const Tensor& t, int64_t first, int64_t count) { return t.as_matrix().slice(first, first + count); }

}  // namespace

std::vector<GemmGroup> grouped_matmul_groups(const Tensor& out, const Tensor& a, std::span<const Tensor> b,
                                             std::span<const int64_t> group_rows,
                                             const ops::GroupedMatmulOptions& options) {
  GPT_CHECK_EQ(b.size(), group_rows.size()) << "grouped_matmul: one weight per group";
  GPT_CHECK(options.bias.empty() || options.bias.size() == group_rows.size()) << "grouped_matmul: one bias per group";
  GPT_CHECK_EQ(out.rows(), a.rows()) << "grouped_matmul: output " << out.to_string() << " for " << a.to_string();
  GPT_CHECK(out.dtype() == a.dtype()) << "grouped_matmul: output " << out.to_string() << " for " << a.to_string();
  check_rows(group_rows, a.rows(), "grouped_matmul");
  std::vector<GemmGroup> groups;
  int64_t first = 0;
  for (size_t g = 0; g < group_rows.size(); ++g) {
    const int64_t rows = group_rows[g];
    if (rows > 0) {
      GemmGroup group{.first_row = first, .rows = rows, .out = rows_of(out, first, rows), .a = rows_of(a, first, rows),
                      .b = b[g]};
      group.options.transpose_b = options.transpose_b;
      if (!options.bias.empty()) group.options.bias = options.bias[g];
      if (options.pre_gelu.defined()) group.options.pre_gelu = rows_of(options.pre_gelu, first, rows);
      group.shape = checked_gemm_shape(group.out, group.a, group.b, group.options);
      groups.push_back(std::move(group));
    }
    first += rows;
  }
  return groups;
}

std::vector<GemmGroup> grouped_weight_grad_groups(std::span<const Tensor> out, const Tensor& dy, const Tensor& x,
                                                  std::span<const int64_t> group_rows) {
  GPT_CHECK_EQ(out.size(), group_rows.size()) << "grouped_matmul_weight_grad: one gradient per group";
  GPT_CHECK_EQ(dy.rows(), x.rows()) << "grouped_matmul_weight_grad: " << dy.to_string() << " and " << x.to_string();
  check_rows(group_rows, dy.rows(), "grouped_matmul_weight_grad");
  std::vector<GemmGroup> groups;
  int64_t first = 0;
  for (size_t g = 0; g < group_rows.size(); ++g) {
    const int64_t rows = group_rows[g];
    if (rows > 0) {
      GPT_CHECK(out[g].dtype() == DType::kFloat32) << "grouped_matmul_weight_grad: " << out[g].to_string();
      GemmGroup group{.first_row = first, .rows = rows, .out = out[g], .a = rows_of(dy, first, rows),
                      .b = rows_of(x, first, rows)};
      group.options.transpose_a = true;
      group.options.beta = 1.0f;
      group.shape = checked_gemm_shape(group.out, group.a, group.b, group.options);
      groups.push_back(std::move(group));
    }
    first += rows;
  }
  return groups;
}

}  // namespace gpt
