// LayerNorm forward (optionally fused with the residual add before it) and backward, one warp per
// row with FP32 statistics; weight and bias gradients by deterministic column reduction. Also the
// bias gradient of linear layers (column sums of dy).
#include "kernels/cuda/column_reduction.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kRowsPerBlock = 8;  // one warp per row

// y = LN(x) where x = a + delta + delta_bias when delta is given (then also written to residual).
template <typename T>
__global__ void layernorm_forward_kernel(T* y, float* mean_out, float* rstd_out, T* residual, const T* a,
                                         const T* delta, const T* delta_bias, const T* weight, const T* bias,
                                         int64_t rows, int64_t h, float epsilon) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const T* x_row = a + row * h;
  // Pass 1: the input as stored (rounded like the residual the backward will read), and its mean.
  float total = 0.0f;
  for (int64_t j = lane; j < h; j += 32) {
    float v = to_float(x_row[j]);
    if (delta) {
      v = to_float(from_float<T>(v + to_float(delta[row * h + j]) + (delta_bias ? to_float(delta_bias[j]) : 0.0f)));
      residual[row * h + j] = from_float<T>(v);
    }
    total += v;
  }
  const float mean = warp_sum(total) / static_cast<float>(h);
  const T* source = delta ? residual + row * h : x_row;
  __syncwarp();
  float squares = 0.0f;
  for (int64_t j = lane; j < h; j += 32) {
    const float d = to_float(source[j]) - mean;
    squares += d * d;
  }
  const float rstd = rsqrtf(warp_sum(squares) / static_cast<float>(h) + epsilon);
  for (int64_t j = lane; j < h; j += 32) {
    const float normalized = (to_float(source[j]) - mean) * rstd;
    y[row * h + j] = from_float<T>(normalized * to_float(weight[j]) + to_float(bias[j]));
  }
  if (lane == 0) {
    mean_out[row] = mean;
    rstd_out[row] = rstd;
  }
}

template <typename T>
__global__ void layernorm_backward_dx_kernel(T* dx, const T* dy, const T* x, const float* mean, const float* rstd,
                                             const T* weight, int64_t rows, int64_t h, bool accumulate) {
  const int64_t row = blockIdx.x * static_cast<int64_t>(kRowsPerBlock) + threadIdx.y;
  if (row >= rows) return;
  const int lane = threadIdx.x;
  const float mu = mean[row], rs = rstd[row];
  float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
  for (int64_t j = lane; j < h; j += 32) {
    const float xhat = (to_float(x[row * h + j]) - mu) * rs;
    const float dxhat = to_float(dy[row * h + j]) * to_float(weight[j]);
    sum_dxhat += dxhat;
    sum_dxhat_xhat += dxhat * xhat;
  }
  const float mean_dxhat = warp_sum(sum_dxhat) / static_cast<float>(h);
  const float mean_dxhat_xhat = warp_sum(sum_dxhat_xhat) / static_cast<float>(h);
  for (int64_t j = lane; j < h; j += 32) {
    const float xhat = (to_float(x[row * h + j]) - mu) * rs;
    const float dxhat = to_float(dy[row * h + j]) * to_float(weight[j]);
    float value = rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
    if (accumulate) value += to_float(dx[row * h + j]);
    dx[row * h + j] = from_float<T>(value);
  }
}

template <typename T>
struct WeightGradValue {  // dy * xhat
  const T* dy;
  const T* x;
  const float* mean;
  const float* rstd;
  int64_t h;
  __device__ float operator()(int64_t row, int64_t col) const {
    return to_float(dy[row * h + col]) * (to_float(x[row * h + col]) - mean[row]) * rstd[row];
  }
};

template <typename T>
struct MatrixValue {
  const T* data;
  int64_t cols;
  __device__ float operator()(int64_t row, int64_t col) const { return to_float(data[row * cols + col]); }
};

template <typename T>
void launch_forward(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& residual,
                    const Tensor& x, const Tensor& delta, const Tensor& delta_bias, const Tensor& weight,
                    const Tensor& bias, float epsilon) {
  const int64_t rows = x.rows(), h = x.cols();
  GPT_CHECK(y.numel() == x.numel() && weight.numel() == h && bias.numel() == h && mean.numel() == rows &&
            rstd.numel() == rows)
      << "LayerNorm shapes";
  const dim3 block(32, kRowsPerBlock);
  layernorm_forward_kernel<T><<<grid_for(rows, kRowsPerBlock), block, 0, stream_of(ctx)>>>(
      device_data<T>(y), mean.data_as<float>(), rstd.data_as<float>(), optional_device_data<T>(residual),
      device_data<T>(x), optional_device_data<T>(delta), optional_device_data<T>(delta_bias), device_data<T>(weight),
      device_data<T>(bias), rows, h, epsilon);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void layernorm_forward(Context& ctx, const Tensor& y, const Tensor& mean, const Tensor& rstd, const Tensor& x,
                       const Tensor& weight, const Tensor& bias, float epsilon) {
  dispatch_float_type(x.dtype(), [&](auto tag) {
    launch_forward<decltype(tag)>(ctx, y, mean, rstd, Tensor(), x, Tensor(), Tensor(), weight, bias, epsilon);
  });
}

void residual_layernorm_forward(Context& ctx, const Tensor& residual, const Tensor& y, const Tensor& mean,
                                const Tensor& rstd, const Tensor& x, const Tensor& delta, const Tensor& delta_bias,
                                const Tensor& weight, const Tensor& bias, float epsilon) {
  GPT_CHECK(residual.numel() == x.numel() && delta.numel() == x.numel()) << "residual shapes";
  dispatch_float_type(x.dtype(), [&](auto tag) {
    launch_forward<decltype(tag)>(ctx, y, mean, rstd, residual, x, delta, delta_bias, weight, bias, epsilon);
  });
}

void layernorm_backward(Context& ctx, const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                        const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight,
                        bool accumulate_dx) {
  const int64_t rows = x.rows(), h = x.cols();
  GPT_CHECK(dx.numel() == x.numel() && dy.numel() == x.numel() && dweight.numel() == h && dbias.numel() == h)
      << "LayerNorm backward shapes";
  auto* partials = static_cast<float*>(ctx.cuda().scratch(kRowChunks * h * sizeof(float), "layernorm_backward"));
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const dim3 block(32, kRowsPerBlock);
    layernorm_backward_dx_kernel<T><<<grid_for(rows, kRowsPerBlock), block, 0, stream_of(ctx)>>>(
        device_data<T>(dx), device_data<T>(dy), device_data<T>(x), mean.data_as<float>(), rstd.data_as<float>(),
        device_data<T>(weight), rows, h, accumulate_dx);
    GPT_CUDA_CHECK_LAUNCH();
    column_sums_into(ctx, WeightGradValue<T>{device_data<T>(dy), device_data<T>(x), mean.data_as<float>(),
                                             rstd.data_as<float>(), h},
                     rows, h, dweight.data_as<float>(), partials);
    column_sums_into(ctx, MatrixValue<T>{device_data<T>(dy), h}, rows, h, dbias.data_as<float>(), partials);
  });
}

void bias_grad(Context& ctx, const Tensor& dbias, const Tensor& dy) {
  const int64_t rows = dy.rows(), cols = dy.cols();
  GPT_CHECK_EQ(dbias.numel(), cols) << "bias_grad";
  auto* partials = static_cast<float*>(ctx.cuda().scratch(kRowChunks * cols * sizeof(float), "bias_grad"));
  dispatch_float_type(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    column_sums_into(ctx, MatrixValue<T>{device_data<T>(dy), cols}, rows, cols, dbias.data_as<float>(), partials);
  });
}

}  // namespace gpt::cuda_ops
