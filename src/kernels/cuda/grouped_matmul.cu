// Grouped GEMMs (the experts of a mixture-of-experts layer) through cuBLAS's
// cublasGemmGroupedBatchedEx: one call for every group, each group a cuBLAS "group" of one problem
// with its own m (rows), in the column-major view matmul.cu uses (C^T = op(B)^T op(A)^T). FP32
// accumulation (CUBLAS_COMPUTE_32F, no TF32, as matmul).
//
// What goes to one matmul per group instead (cuBLASLt, matmul.cu), and why:
// - a bias or GeLU epilogue: the grouped call has no epilogue, and applying it afterwards would
//   round the product to the output dtype before the bias and the GeLU, where matmul (and the CPU
//   reference) apply them to the FP32 product; the fused cuBLASLt epilogue keeps those numbers.
// - operands in BF16 or FP16 with a float32 output (the weight gradient into FP32 main_grad under
//   --bf16): cublasGemmGroupedBatchedEx supports with CUBLAS_COMPUTE_32F only A, B and C of one
//   dtype (CUDA_R_16BF, CUDA_R_16F or CUDA_R_32F).
// - an empty inner dimension (cuBLAS's k = 0): matmul's zero fill.
#include <cublas_v2.h>

#include <algorithm>
#include <memory>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/grouped_gemm.h"

namespace gpt::cuda_ops {
namespace {

#define GPT_CUBLAS_GROUPED_CHECK(call)                                                               \
  do {                                                                                               \
    const cublasStatus_t gpt_cublas_status_ = (call);                                                \
    if (gpt_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                               \
      GPT_FATAL() << #call << " failed: " << cublasGetStatusString(gpt_cublas_status_);              \
    }                                                                                                \
  } while (false)

// The groups of one cuBLAS call; the operand pointers travel as a kernel argument (no host copy, so
// no stream synchronization) into the device arrays cuBLAS reads.
constexpr int kMaxGroupsPerCall = 128;
struct PointerTable {
  const void* a[kMaxGroupsPerCall];
  const void* b[kMaxGroupsPerCall];
  void* c[kMaxGroupsPerCall];
};

__global__ void write_pointers(PointerTable table, int count, const void** a, const void** b, void** c) {
  const int i = static_cast<int>(threadIdx.x);
  if (i < count) {
    a[i] = table.a[i];
    b[i] = table.b[i];
    c[i] = table.c[i];
  }
}

cudaDataType_t cuda_type(DType dtype) {
  return dtype == DType::kBFloat16 ? CUDA_R_16BF : dtype == DType::kFloat16 ? CUDA_R_16F : CUDA_R_32F;
}

// This context's cuBLAS handle, on its stream, with cuBLASLt's GEMM workspace (GEMMs run one at a
// time on the stream).
cublasHandle_t cublas_handle(cuda::DeviceContext& device) {
  std::shared_ptr<void>& state = device.op_state("grouped_matmul: cuBLAS handle");
  if (!state) {
    cublasHandle_t handle = nullptr;
    GPT_CUBLAS_GROUPED_CHECK(cublasCreate(&handle));
    state = std::shared_ptr<void>(handle, [](void* h) { cublasDestroy(static_cast<cublasHandle_t>(h)); });
    GPT_CUBLAS_GROUPED_CHECK(cublasSetStream(handle, device.stream()));
    GPT_CUBLAS_GROUPED_CHECK(
        cublasSetWorkspace(handle, device.gemm_workspace(), cuda::DeviceContext::kGemmWorkspaceBytes));
  }
  return static_cast<cublasHandle_t>(state.get());
}

bool grouped_call_supported(const GemmGroup& g) {
  return !g.options.bias.defined() && !g.options.pre_gelu.defined() && g.out.dtype() == g.a.dtype() &&
         g.shape.k > 0 && g.options.alpha == 1.0f;
}

// Groups [first, first + count) (count <= kMaxGroupsPerCall) in one cublasGemmGroupedBatchedEx.
void grouped_call(Context& ctx, const std::vector<GemmGroup>& groups, size_t first, int count) {
  cuda::DeviceContext& device = ctx.cuda();
  PointerTable table{};
  std::vector<cublasOperation_t> trans_a(count), trans_b(count);
  std::vector<int64_t> m(count), n(count), k(count), lda(count), ldb(count), ldc(count), sizes(count, 1);
  std::vector<float> alpha(count, 1.0f), beta(count);
  for (int i = 0; i < count; ++i) {
    const GemmGroup& g = groups[first + static_cast<size_t>(i)];
    // Column-major view: cuBLAS's A is our b, its B our a, its C^T our out.
    table.a[i] = g.b.data();
    table.b[i] = g.a.data();
    table.c[i] = g.out.data();
    trans_a[i] = g.options.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    trans_b[i] = g.options.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    m[i] = g.shape.n;
    n[i] = g.shape.m;
    k[i] = g.shape.k;
    lda[i] = g.b.cols();
    ldb[i] = g.a.cols();
    ldc[i] = g.shape.n;
    beta[i] = g.options.beta;
  }
  auto** arrays = static_cast<void**>(device.scratch(3 * kMaxGroupsPerCall * sizeof(void*), "grouped_matmul"));
  const void** a = const_cast<const void**>(arrays);
  const void** b = const_cast<const void**>(arrays + kMaxGroupsPerCall);
  void** c = arrays + 2 * kMaxGroupsPerCall;
  write_pointers<<<1, kMaxGroupsPerCall, 0, device.stream()>>>(table, count, a, b, c);
  GPT_CUDA_CHECK_LAUNCH();
  const GemmGroup& g0 = groups[first];
  GPT_CUBLAS_GROUPED_CHECK(cublasGemmGroupedBatchedEx_64(
      cublas_handle(device), trans_a.data(), trans_b.data(), m.data(), n.data(), k.data(), alpha.data(), a,
      cuda_type(g0.b.dtype()), lda.data(), b, cuda_type(g0.a.dtype()), ldb.data(), beta.data(), c,
      cuda_type(g0.out.dtype()), ldc.data(), count, sizes.data(), CUBLAS_COMPUTE_32F));
}

// The supported groups in grouped calls, the others through matmul.
void run_groups(Context& ctx, const std::vector<GemmGroup>& groups) {
  std::vector<GemmGroup> grouped;
  for (const GemmGroup& g : groups) {
    if (grouped_call_supported(g)) {
      grouped.push_back(g);
    } else {
      cuda_ops::matmul(ctx, g.out, g.a, g.b, g.options);
    }
  }
  for (size_t first = 0; first < grouped.size(); first += kMaxGroupsPerCall) {
    grouped_call(ctx, grouped, first, static_cast<int>(std::min<size_t>(kMaxGroupsPerCall, grouped.size() - first)));
  }
}

}  // namespace

void grouped_matmul(Context& ctx, const Tensor& out, const Tensor& a, std::span<const Tensor> b,
                    std::span<const int64_t> group_rows, const ops::GroupedMatmulOptions& options) {
  run_groups(ctx, grouped_matmul_groups(out, a, b, group_rows, options));
}

void grouped_matmul_weight_grad(Context& ctx, std::span<const Tensor> out, const Tensor& dy, const Tensor& x,
                                std::span<const int64_t> group_rows) {
  run_groups(ctx, grouped_weight_grad_groups(out, dy, x, group_rows));
}

}  // namespace gpt::cuda_ops
