// The CUDA grouped GEMMs (cublasGemmGroupedBatchedEx, or one cuBLASLt matmul per group for the
// epilogues and the mixed-dtype weight gradient) against the CPU backend on the same inputs: empty
// groups, both weight layouts, bias and GeLU, FP32 / BF16 / FP16, and more groups than one cuBLAS
// call takes (128). Skips without a GPU.
#include <vector>

#include "gpu/ops_twin.h"

namespace gpt {
namespace {

using gpu_test::kTypes;
using gpu_test::OpsTest;
using gpu_test::Twin;

using MoeGroupedMatmulTest = OpsTest;

std::vector<std::vector<int64_t>> group_cases() {
  std::vector<int64_t> many(130, 3);
  many[7] = 0;
  many[129] = 17;
  return {{0, 37, 0, 90, 1, 0}, {256}, {5, 0, 64, 3}, {0, 0}, many};
}

int64_t total(const std::vector<int64_t>& rows) {
  int64_t m = 0;
  for (int64_t r : rows) m += r;
  return m;
}

TEST_F(MoeGroupedMatmulTest, ForwardAndInputGradientMatchTheCpu) {
  const int64_t k = 64, n = 96;
  for (DType t : kTypes) {
    for (const std::vector<int64_t>& group_rows : group_cases()) {
      const int64_t m = total(group_rows);
      for (bool transpose_b : {false, true}) {
        for (int epilogue = 0; epilogue < 3; ++epilogue) {  // none (the grouped call), bias, bias and GeLU
          SCOPED_TRACE(std::string(dtype_name(t)) + " groups " + std::to_string(group_rows.size()) + " tb " +
                       std::to_string(transpose_b) + " epilogue " + std::to_string(epilogue));
          Twin a = make(t, {m, k});
          std::vector<Tensor> b_cpu, b_gpu, bias_cpu, bias_gpu;
          std::vector<Twin> keep;
          for (size_t g = 0; g < group_rows.size(); ++g) {
            keep.push_back(make(t, transpose_b ? Shape({n, k}) : Shape({k, n}), 0.2f));
            b_cpu.push_back(keep.back().cpu);
            b_gpu.push_back(keep.back().gpu);
            keep.push_back(epilogue > 0 ? make(t, {n}) : Twin{});
            bias_cpu.push_back(keep.back().cpu);
            bias_gpu.push_back(keep.back().gpu);
          }
          Twin out = output(t, {m, n}), pre = epilogue == 2 ? output(t, {m, n}) : Twin{};
          ops::grouped_matmul(cpu_, out.cpu, a.cpu, b_cpu, group_rows,
                              {.transpose_b = transpose_b, .bias = bias_cpu, .pre_gelu = pre.cpu});
          ops::grouped_matmul(*gpu_, out.gpu, a.gpu, b_gpu, group_rows,
                              {.transpose_b = transpose_b, .bias = bias_gpu, .pre_gelu = pre.gpu});
          if (m > 0) {
            EXPECT_LE(error(out), tolerance(t));
            if (epilogue == 2) EXPECT_LE(error(pre), tolerance(t));
          }
        }
      }
    }
  }
}

TEST_F(MoeGroupedMatmulTest, WeightGradientAccumulatesAsTheCpu) {
  const int64_t n = 96, k = 64;
  for (DType t : kTypes) {
    for (const std::vector<int64_t>& group_rows : group_cases()) {
      SCOPED_TRACE(std::string(dtype_name(t)) + " groups " + std::to_string(group_rows.size()));
      const int64_t m = total(group_rows);
      Twin dy = make(t, {m, n}), x = make(t, {m, k});
      std::vector<Twin> grads;
      std::vector<Tensor> grads_cpu, grads_gpu;
      for (size_t g = 0; g < group_rows.size(); ++g) {
        grads.push_back(make(DType::kFloat32, {n, k}));  // beta 1: accumulated into
        grads_cpu.push_back(grads.back().cpu);
        grads_gpu.push_back(grads.back().gpu);
      }
      ops::grouped_matmul_weight_grad(cpu_, grads_cpu, dy.cpu, x.cpu, group_rows);
      ops::grouped_matmul_weight_grad(*gpu_, grads_gpu, dy.gpu, x.gpu, group_rows);
      for (size_t g = 0; g < group_rows.size(); ++g) {
        EXPECT_LE(error(grads[g]), 1e-5) << "group " << g;
      }
    }
  }
}

}  // namespace
}  // namespace gpt
