// GEMMs through cuBLASLt: BF16, FP16 or FP32 operands, FP32 accumulation (no TF32, so FP32 runs match the
// CPU reference), BF16, FP16 or FP32 output, bias and GeLU-with-aux epilogues, one cached algorithm per
// shape. Row-major C[m, n] = op(A) op(B) is computed as the column-major C^T = op(B)^T op(A)^T.
#include <cublasLt.h>

#include <map>
#include <mutex>
#include <tuple>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/gemm_shape.h"

namespace gpt::cuda_ops {
namespace {

#define GPT_CUBLAS_CHECK(call)                                                                  \
  do {                                                                                          \
    const cublasStatus_t gpt_cublas_status_ = (call);                                           \
    if (gpt_cublas_status_ != CUBLAS_STATUS_SUCCESS) {                                          \
      GPT_FATAL() << #call << " failed: " << cublasLtGetStatusString(gpt_cublas_status_);           \
    }                                                                                           \
  } while (false)

cudaDataType_t cuda_type(DType dtype) {
  return dtype == DType::kBFloat16 ? CUDA_R_16BF : dtype == DType::kFloat16 ? CUDA_R_16F : CUDA_R_32F;
}

// Everything that selects an algorithm.
using GemmKey = std::tuple<int64_t, int64_t, int64_t, bool, bool, int, int, int, bool>;

struct CachedGemm {
  cublasLtMatmulAlgo_t algo;
};

std::mutex cache_mutex;
std::map<GemmKey, CachedGemm> algorithm_cache;

// RAII for the descriptor objects of one call.
struct LtDescriptors {
  cublasLtMatmulDesc_t op = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
  cublasLtMatmulPreference_t preference = nullptr;
  ~LtDescriptors() {
    if (preference) cublasLtMatmulPreferenceDestroy(preference);
    if (c) cublasLtMatrixLayoutDestroy(c);
    if (b) cublasLtMatrixLayoutDestroy(b);
    if (a) cublasLtMatrixLayoutDestroy(a);
    if (op) cublasLtMatmulDescDestroy(op);
  }
};

}  // namespace

void matmul(Context& ctx, const Tensor& out, const Tensor& a, const Tensor& b, const ops::MatmulOptions& options) {
  const auto [m, n, k] = checked_gemm_shape(out, a, b, options);
  // The trainer refuses --fp8-format with --device cuda before it gets here (FP8 GEMMs through
  // cuBLASLt need FP8 operand buffers this backend does not allocate yet).
  GPT_CHECK(!options.fp8.enabled) << "FP8 GEMMs are emulated on the CPU backend only";
  const bool gelu = options.pre_gelu.defined();
  if (m == 0 || n == 0) return;
  if (k == 0) {  // cuBLASLt rejects k = 0; the product is zero
    GPT_CHECK(options.beta == 0.0f && !options.bias.defined()) << "empty GEMM with beta or bias";
    zero(ctx, out);
    return;
  }
  cuda::DeviceContext& device = ctx.cuda();
  LtDescriptors d;
  GPT_CUBLAS_CHECK(cublasLtMatmulDescCreate(&d.op, CUBLAS_COMPUTE_32F, CUDA_R_32F));
  // Column-major view: "A" is our b, "B" is our a.
  const cublasOperation_t trans_lt_a = options.transpose_b ? CUBLAS_OP_T : CUBLAS_OP_N;
  const cublasOperation_t trans_lt_b = options.transpose_a ? CUBLAS_OP_T : CUBLAS_OP_N;
  GPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSA, &trans_lt_a, sizeof(trans_lt_a)));
  GPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_TRANSB, &trans_lt_b, sizeof(trans_lt_b)));
  cublasLtEpilogue_t epilogue = gelu ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS
                                     : (options.bias.defined() ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT);
  GPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE, &epilogue, sizeof(epilogue)));
  if (options.bias.defined()) {
    const void* bias = options.bias.data();
    GPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &bias, sizeof(bias)));
  }
  if (gelu) {
    void* aux = options.pre_gelu.data();
    const int64_t aux_ld = n;
    GPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
    GPT_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(d.op, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
  }
  // Layouts (column-major): A_lt is b seen as [rows = b.cols, cols = b.rows], and so on.
  GPT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.a, cuda_type(b.dtype()), static_cast<uint64_t>(b.cols()),
                                              static_cast<uint64_t>(b.rows()), b.cols()));
  GPT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.b, cuda_type(a.dtype()), static_cast<uint64_t>(a.cols()),
                                              static_cast<uint64_t>(a.rows()), a.cols()));
  GPT_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&d.c, cuda_type(out.dtype()), static_cast<uint64_t>(n),
                                              static_cast<uint64_t>(m), n));

  const GemmKey key{m, n, k, options.transpose_a, options.transpose_b, static_cast<int>(a.dtype()),
                    static_cast<int>(out.dtype()), static_cast<int>(epilogue), options.beta != 0.0f};
  cublasLtMatmulAlgo_t algo;
  {
    std::lock_guard<std::mutex> lock(cache_mutex);
    auto it = algorithm_cache.find(key);
    if (it == algorithm_cache.end()) {
      GPT_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&d.preference));
      const uint64_t workspace = cuda::DeviceContext::kGemmWorkspaceBytes;
      GPT_CUBLAS_CHECK(cublasLtMatmulPreferenceSetAttribute(d.preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES,
                                                            &workspace, sizeof(workspace)));
      cublasLtMatmulHeuristicResult_t result{};
      int found = 0;
      GPT_CUBLAS_CHECK(cublasLtMatmulAlgoGetHeuristic(device.cublaslt(), d.op, d.a, d.b, d.c, d.c, d.preference, 1,
                                                      &result, &found));
      GPT_CHECK(found > 0) << "cuBLASLt has no algorithm for GEMM m=" << m << " n=" << n << " k=" << k;
      it = algorithm_cache.emplace(key, CachedGemm{result.algo}).first;
    }
    algo = it->second.algo;
  }
  const float alpha = options.alpha, beta = options.beta;
  GPT_CUBLAS_CHECK(cublasLtMatmul(device.cublaslt(), d.op, &alpha, b.data(), d.a, a.data(), d.b, &beta, out.data(), d.c,
                                  out.data(), d.c, &algo, device.gemm_workspace(),
                                  cuda::DeviceContext::kGemmWorkspaceBytes, device.stream()));
}

}  // namespace gpt::cuda_ops
