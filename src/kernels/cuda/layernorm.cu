// LayerNorm forward (optionally fused with the residual add before it) and backward, FP32
// statistics: the mean and then the variance about it. The kernels and launchers are
// row_norm_kernels.cuh, shared with rmsnorm.cu; this file states LayerNorm's statistic. Also the
// bias gradient of linear layers (column sums of dy).
#include "kernels/cuda/column_reduction.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/row_norm.cuh"
#include "kernels/cuda/row_norm_kernels.cuh"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

// xhat = (x - mean) * rstd, y = xhat * weight + bias; backward's sums are dxhat and dxhat * xhat,
// dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)).
struct LayerNormStatistic {
  static constexpr bool kCentered = true;
  static constexpr int kSums = 2;
  static constexpr const char* kScratch = "layernorm_backward";

  // Two sums over the row group: the mean, then the squares about it (only the row's own columns).
  template <int kGroup, int kPacks, int W>
  static __device__ __forceinline__ RowStatistics of_packs(const float (&v)[kPacks][W], bool active, int64_t h,
                                                           float epsilon, float* scratch) {
    float total[1] = {0.0f};
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
#pragma unroll
      for (int k = 0; k < W; ++k) total[0] += v[p][k];  // 0 past the row end
    }
    group_sum<kGroup>(total, scratch);
    const float mean = total[0] / static_cast<float>(h);
    float squares[1] = {0.0f};
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int64_t col = pack_column<kGroup, W>(p);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        const float d = v[p][k] - mean;
        if (active && col + k < h) squares[0] += d * d;
      }
    }
    group_sum<kGroup>(squares, scratch);
    return {mean, rsqrtf(squares[0] / static_cast<float>(h) + epsilon)};
  }

  // Multi-pass: the first pass sums x; a second pass over the stored row sums the squares.
  static __device__ __forceinline__ void add_first_pass(float& total, float v) { total += v; }
  template <typename T>
  static __device__ __forceinline__ RowStatistics of_row(float total, const T* source, int64_t h, float epsilon) {
    const float mean = block_sum(total) / static_cast<float>(h);
    float squares = 0.0f;
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      const float d = to_float(source[j]) - mean;
      squares += d * d;
    }
    return {mean, rsqrtf(block_sum(squares) / static_cast<float>(h) + epsilon)};
  }

  static __device__ __forceinline__ float xhat(float x, float mean, float rstd) { return (x - mean) * rstd; }
  static __device__ __forceinline__ float scale(float xhat, float w, float b) { return xhat * w + b; }
  static __device__ __forceinline__ void add_sums(float (&sums)[kSums], float dxhat, float xhat) {
    sums[0] += dxhat;
    sums[1] += dxhat * xhat;
  }
  struct Means {
    float dxhat, dxhat_xhat;
  };
  static __device__ __forceinline__ Means means(const float (&sums)[kSums], int64_t h) {
    return {sums[0] / static_cast<float>(h), sums[1] / static_cast<float>(h)};
  }
  static __device__ __forceinline__ float dx(float rstd, float dxhat, float xhat, const Means& means) {
    return rstd * (dxhat - means.dxhat - xhat * means.dxhat_xhat);
  }
};

template <typename T>
void launch_forward(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& residual,
                    const Tensor& x, const Tensor& delta, const Tensor& delta_bias, const Tensor& weight,
                    const Tensor& bias, float epsilon, float weight_offset) {
  const int64_t rows = x.rows(), h = x.cols();
  GPT_CHECK(y.numel() == x.numel() && weight.numel() == h && bias.numel() == h && mean.numel() == rows &&
            rstd.numel() == rows)
      << "LayerNorm shapes";
  GPT_CHECK(!delta_bias.defined() || delta_bias.numel() == h) << "LayerNorm residual bias " << delta_bias.to_string();
  if (rows == 0 || h == 0) return;
  launch_row_norm_forward<LayerNormStatistic>(
      ctx, RowNormForward<T>{device_data<T>(y), mean.data_as<float>(), rstd.data_as<float>(),
                             optional_device_data<T>(residual), device_data<T>(x), optional_device_data<T>(delta),
                             optional_device_data<T>(delta_bias), device_data<T>(weight), device_data<T>(bias), rows,
                             h, epsilon, false, weight_offset});
}

}  // namespace

void layernorm_forward(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, float epsilon, float weight_offset) {
  dispatch_float_type(x.dtype(), [&](auto tag) {
    launch_forward<decltype(tag)>(ctx, y, mean, rstd, Tensor(), x, Tensor(), Tensor(), weight, bias, epsilon,
                                  weight_offset);
  });
}

void residual_layernorm_forward(Context& ctx, const Tensor& residual, const Tensor& y, const Tensor& mean,
                                const Tensor& rstd, const Tensor& x, const Tensor& delta, const Tensor& delta_bias,
                                const Tensor& weight, const Tensor& bias, float epsilon, float weight_offset) {
  GPT_CHECK(residual.numel() == x.numel() && delta.numel() == x.numel()) << "residual shapes";
  dispatch_float_type(x.dtype(), [&](auto tag) {
    launch_forward<decltype(tag)>(ctx, y, mean, rstd, residual, x, delta, delta_bias, weight, bias, epsilon,
                                  weight_offset);
  });
}

void layernorm_backward(Context& ctx, const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                        const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                        bool accumulate_dx, float weight_offset) {
  const int64_t rows = x.rows(), h = x.cols();
  GPT_CHECK(dx.numel() == x.numel() && dy.numel() == x.numel() && dweight.numel() == h && dbias.numel() == h &&
            weight.numel() == h && mean.numel() == rows && rstd.numel() == rows)
      << "LayerNorm backward shapes";
  if (rows == 0 || h == 0) return;
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_row_norm_backward<LayerNormStatistic>(
        ctx, RowNormBackward<T>{device_data<T>(dx), nullptr, device_data<T>(dy), device_data<T>(x), mean.data_as<float>(),
                                rstd.data_as<float>(), device_data<T>(weight), rows, h, accumulate_dx, false, weight_offset},
        dweight.data_as<float>(), dbias.data_as<float>());
  });
}

void bias_grad(Context& ctx, const Tensor& dbias, const Tensor& dy) {
  const int64_t rows = dy.rows(), cols = dy.cols();
  GPT_CHECK_EQ(dbias.numel(), cols) << "bias_grad";
  if (dy.numel() == 0) return;
  dispatch_float_type(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    matrix_column_sums_into(ctx, device_data<T>(dy), rows, cols, dbias.data_as<float>(), "bias_grad");
  });
}

}  // namespace gpt::cuda_ops
