#include "kernels/gemm_shape.h"

namespace gpt {

GemmShape checked_gemm_shape(const Tensor& out, const Tensor& a, const Tensor& b, const ops::MatmulOptions& options) {
  const int64_t m = options.transpose_a ? a.cols() : a.rows();
  const int64_t k = options.transpose_a ? a.rows() : a.cols();
  const int64_t k_b = options.transpose_b ? b.cols() : b.rows();
  const int64_t n = options.transpose_b ? b.rows() : b.cols();
  GPT_CHECK_EQ(k, k_b) << "matmul inner dims of " << a.to_string() << " and " << b.to_string();
  GPT_CHECK(out.rows() == m && out.cols() == n)
      << "matmul output " << out.to_string() << ", expected [" << m << ", " << n << "]";
  GPT_CHECK(a.dtype() == b.dtype()) << "matmul operands " << a.to_string() << " and " << b.to_string();
  GPT_CHECK(out.dtype() == a.dtype() || out.dtype() == DType::kFloat32)
      << "matmul output " << out.to_string() << " for operands " << a.to_string();
  if (options.bias.defined()) {
    GPT_CHECK(options.bias.numel() == n && options.bias.dtype() == out.dtype()) << "matmul bias " << options.bias.to_string();
  }
  if (options.pre_gelu.defined()) {
    GPT_CHECK(options.bias.defined() && options.pre_gelu.dtype() == out.dtype() &&
              options.pre_gelu.numel() == out.numel())
        << "GeLU epilogue needs a bias and a pre_gelu tensor like the output";
  }
  return {m, n, k};
}

}  // namespace gpt
