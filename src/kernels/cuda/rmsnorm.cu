// RMSNorm forward (optionally fused with the residual add before it) and backward, FP32
// statistics: the mean square, no mean subtraction and no bias (Megatron's RMSNorm). The kernels
// and launchers are row_norm_kernels.cuh, shared with layernorm.cu; this file states RMSNorm's
// statistic.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/row_norm.cuh"
#include "kernels/cuda/row_norm_kernels.cuh"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

// xhat = x * rstd, y = xhat * weight; backward's one sum is dxhat * xhat,
// dx = rstd * (dxhat - xhat * mean(dxhat * xhat)).
struct RmsNormStatistic {
  static constexpr bool kCentered = false;
  static constexpr int kSums = 1;
  static constexpr const char* kScratch = "rmsnorm_backward";

  // One sum over the row group: the squares (0 past the row end).
  template <int kGroup, int kPacks, int W>
  static __device__ __forceinline__ RowStatistics of_packs(const float (&v)[kPacks][W], bool /*active*/, int64_t h,
                                                           float epsilon, float* scratch) {
    float squares = 0.0f;
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
#pragma unroll
      for (int k = 0; k < W; ++k) squares += v[p][k] * v[p][k];
    }
    squares = group_sum<kGroup>(squares, scratch);
    return {0.0f, rsqrtf(squares / static_cast<float>(h) + epsilon)};
  }

  // Multi-pass: the first pass sums the squares, which is all the statistic needs.
  static __device__ __forceinline__ void add_first_pass(float& squares, float v) { squares += v * v; }
  template <typename T>
  static __device__ __forceinline__ RowStatistics of_row(float squares, const T* /*source*/, int64_t h, float epsilon) {
    return {0.0f, rsqrtf(block_sum(squares) / static_cast<float>(h) + epsilon)};
  }

  static __device__ __forceinline__ float xhat(float x, float /*mean*/, float rstd) { return x * rstd; }
  static __device__ __forceinline__ float scale(float xhat, float w, float /*b*/) { return xhat * w; }
  static __device__ __forceinline__ void add_sums(float (&sums)[kSums], float dxhat, float xhat) {
    sums[0] += dxhat * xhat;
  }
  struct Means {
    float dxhat_xhat;
  };
  static __device__ __forceinline__ Means means(const float (&sums)[kSums], int64_t h) {
    return {sums[0] / static_cast<float>(h)};
  }
  static __device__ __forceinline__ float dx(float rstd, float dxhat, float xhat, const Means& means) {
    return rstd * (dxhat - xhat * means.dxhat_xhat);
  }
};

void check_rmsnorm_shapes(const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight) {
  GPT_CHECK(y.numel() == x.numel() && weight.numel() == x.cols() && rstd.numel() == x.rows() &&
            rstd.dtype() == DType::kFloat32)
      << "RMSNorm shapes: y " << y.to_string() << ", rstd " << rstd.to_string() << ", x " << x.to_string()
      << ", weight " << weight.to_string();
}

template <typename T>
void launch_forward(Context& ctx, const Tensor& y, const Tensor& rstd, const Tensor& residual, const Tensor& x,
                    const Tensor& delta, const Tensor& delta_bias, const Tensor& weight, float epsilon,
                    float weight_offset) {
  const int64_t rows = x.rows(), h = x.cols();
  check_rmsnorm_shapes(y, rstd, x, weight);
  GPT_CHECK(!delta_bias.defined() || delta_bias.numel() == h) << "RMSNorm residual bias " << delta_bias.to_string();
  if (rows == 0 || h == 0) return;
  launch_row_norm_forward<RmsNormStatistic>(
      ctx, RowNormForward<T>{device_data<T>(y), nullptr, rstd.data_as<float>(), optional_device_data<T>(residual),
                             device_data<T>(x), optional_device_data<T>(delta), optional_device_data<T>(delta_bias),
                             device_data<T>(weight), nullptr, rows, h, epsilon, false, weight_offset});
}

}  // namespace

void rmsnorm_forward(Context& ctx, const Tensor& y, const Tensor& rstd, const Tensor& x, const Tensor& weight,
                     float epsilon, float weight_offset) {
  dispatch_float_type(x.dtype(), [&](auto tag) {
    launch_forward<decltype(tag)>(ctx, y, rstd, Tensor(), x, Tensor(), Tensor(), weight, epsilon, weight_offset);
  });
}

void residual_rmsnorm_forward(Context& ctx, const Tensor& residual, const Tensor& y, const Tensor& rstd,
                              const Tensor& x, const Tensor& delta, const Tensor& delta_bias, const Tensor& weight,
                              float epsilon, float weight_offset) {
  GPT_CHECK(residual.numel() == x.numel() && delta.numel() == x.numel()) << "residual shapes";
  dispatch_float_type(x.dtype(), [&](auto tag) {
    launch_forward<decltype(tag)>(ctx, y, rstd, residual, x, delta, delta_bias, weight, epsilon, weight_offset);
  });
}

void rmsnorm_backward(Context& ctx, const Tensor& dx, const Tensor& dweight, const Tensor& dy, const Tensor& x,
                      const Tensor& rstd, const Tensor& weight, bool accumulate_dx, float weight_offset) {
  const int64_t rows = x.rows(), h = x.cols();
  GPT_CHECK(dx.numel() == x.numel() && dy.numel() == x.numel() && dweight.numel() == h && weight.numel() == h &&
            rstd.numel() == rows)
      << "RMSNorm backward shapes";
  if (rows == 0 || h == 0) return;
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_row_norm_backward<RmsNormStatistic>(
        ctx, RowNormBackward<T>{device_data<T>(dx), nullptr, device_data<T>(dy), device_data<T>(x), nullptr,
                                rstd.data_as<float>(), device_data<T>(weight), rows, h, accumulate_dx, false, weight_offset},
        dweight.data_as<float>(), nullptr);
  });
}

}  // namespace gpt::cuda_ops
