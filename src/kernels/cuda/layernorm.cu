// LayerNorm forward (optionally fused with the residual add before it) and backward, FP32
// statistics. A group of kGroup threads owns a row and keeps it in registers (kPacks packs of 16
// bytes per thread), so forward reads x (and delta) once and writes y (and the residual) once, and
// backward reads dy and x once and writes dx once while also accumulating the weight and bias
// gradients of its rows; those per-block partials are added in a fixed order afterwards
// (deterministic, no atomics). Rows too long for registers take a multi-pass path. Also the bias
// gradient of linear layers (column sums of dy).
#include "kernels/cuda/column_reduction.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/row_norm.cuh"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

template <typename T>
struct ForwardArgs {
  T* y;
  float* mean;
  float* rstd;
  T* residual;  // written when delta is given
  const T* x;
  const T* delta;       // optional
  const T* delta_bias;  // optional, [h]
  const T* weight;
  const T* bias;
  int64_t rows, h;
  float epsilon;
  bool vector;
  float weight_offset;  // added to the weight as read: 1 for a zero-centred weight
};

// y = LN(x) where x = a + delta + delta_bias when delta is given (then also written to residual,
// rounded to T: the statistics are those of the stored residual, which backward will read).
// Outputs may alias inputs: each element is read and then written by the same thread.
template <typename T, int kGroup, int kPacks>
__global__ void __launch_bounds__(kThreadsPerBlock<kGroup, kForwardBlock>) layernorm_forward_kernel(ForwardArgs<T> a) {
  constexpr int W = kPackSize<T>;
  constexpr int R = kRowsPerBlock<kGroup, kForwardBlock>;
  __shared__ float scratch[R * (kGroup / 32)];
  const int64_t h = a.h;
  for (int64_t first = blockIdx.x * static_cast<int64_t>(R); first < a.rows; first += static_cast<int64_t>(gridDim.x) * R) {
    const int64_t row = first + threadIdx.y;
    const bool active = row < a.rows;
    float v[kPacks][W];
    float total[1] = {0.0f};
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int64_t col = pack_column<kGroup, W>(p);
      if (!active) {
#pragma unroll
        for (int k = 0; k < W; ++k) v[p][k] = 0.0f;
        continue;
      }
      load_pack<W>(a.x + row * h, col, h, a.vector, v[p]);
      if (a.delta) {
        float d[W], b[W];
        load_pack<W>(a.delta + row * h, col, h, a.vector, d);
        if (a.delta_bias) {
          load_pack<W>(a.delta_bias, col, h, a.vector, b);
        } else {
#pragma unroll
          for (int k = 0; k < W; ++k) b[k] = 0.0f;
        }
#pragma unroll
        for (int k = 0; k < W; ++k) v[p][k] = to_float(from_float<T>(v[p][k] + d[k] + b[k]));
        store_pack<W>(a.residual + row * h, col, h, a.vector, v[p]);
      }
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
    const float rstd = rsqrtf(squares[0] / static_cast<float>(h) + a.epsilon);
    if (!active) continue;
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int64_t col = pack_column<kGroup, W>(p);
      if (col >= h) break;
      float w[W], b[W], out[W];
      load_pack<W>(a.weight, col, h, a.vector, w);
#pragma unroll
      for (int k = 0; k < W; ++k) w[k] += a.weight_offset;
      load_pack<W>(a.bias, col, h, a.vector, b);
#pragma unroll
      for (int k = 0; k < W; ++k) out[k] = (v[p][k] - mean) * rstd * w[k] + b[k];
      store_pack<W>(a.y + row * h, col, h, a.vector, out);
    }
    if (threadIdx.x == 0) {
      a.mean[row] = mean;
      a.rstd[row] = rstd;
    }
  }
}

// Rows too long for the registers: one block per row (grid-stride), three passes over the row.
template <typename T>
__global__ void layernorm_forward_multipass_kernel(ForwardArgs<T> a) {
  const int64_t h = a.h;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x_row = a.x + row * h;
    float total = 0.0f;
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      float v = to_float(x_row[j]);
      if (a.delta) {
        v = to_float(from_float<T>(v + to_float(a.delta[row * h + j]) + (a.delta_bias ? to_float(a.delta_bias[j]) : 0.0f)));
        a.residual[row * h + j] = from_float<T>(v);
      }
      total += v;
    }
    const float mean = block_sum(total) / static_cast<float>(h);  // its barriers publish the residual
    const T* source = a.delta ? a.residual + row * h : x_row;
    float squares = 0.0f;
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      const float d = to_float(source[j]) - mean;
      squares += d * d;
    }
    const float rstd = rsqrtf(block_sum(squares) / static_cast<float>(h) + a.epsilon);
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      const float normalized = (to_float(source[j]) - mean) * rstd;
      a.y[row * h + j] = from_float<T>(normalized * (to_float(a.weight[j]) + a.weight_offset) + to_float(a.bias[j]));
    }
    if (threadIdx.x == 0) {
      a.mean[row] = mean;
      a.rstd[row] = rstd;
    }
  }
}

template <typename T>
struct BackwardArgs {
  T* dx;
  float* partials;  // [gridDim.x, 2, h]: each block's dweight sums, then its dbias sums
  const T* dy;
  const T* x;
  const float* mean;
  const float* rstd;
  const T* weight;
  int64_t rows, h;
  bool accumulate;
  bool vector;
  float weight_offset;  // added to the weight as read: 1 for a zero-centred weight
};

// dx = rstd * (dxhat - mean(dxhat) - xhat * mean(dxhat * xhat)) with dxhat = dy * weight (+= when
// accumulating). Each thread also sums dy * xhat and dy over its rows for its columns; the groups of
// a block then add theirs in order into shared memory, and the block writes one partial row each
// for dweight and dbias. dx may alias dy: both are read into registers before dx is written.
template <typename T, int kGroup, int kPacks>
__global__ void __launch_bounds__(kThreadsPerBlock<kGroup, kBackwardBlock>) layernorm_backward_kernel(BackwardArgs<T> a) {
  constexpr int W = kPackSize<T>;
  constexpr int R = kRowsPerBlock<kGroup, kBackwardBlock>;
  extern __shared__ float column_sums[];  // [2, h], only when R > 1
  __shared__ float scratch[R * (kGroup / 32) * 2];
  const int64_t h = a.h;
  float dweight[kPacks][W] = {}, dbias[kPacks][W] = {};
  for (int64_t first = blockIdx.x * static_cast<int64_t>(R); first < a.rows; first += static_cast<int64_t>(gridDim.x) * R) {
    const int64_t row = first + threadIdx.y;
    const bool active = row < a.rows;
    const float mu = active ? a.mean[row] : 0.0f;
    const float rs = active ? a.rstd[row] : 0.0f;
    float xhat[kPacks][W], dxhat[kPacks][W];
    float sums[2] = {0.0f, 0.0f};  // dxhat, dxhat * xhat
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int64_t col = pack_column<kGroup, W>(p);
      float x[W], g[W], w[W];
      if (active) {
        load_pack<W>(a.x + row * h, col, h, a.vector, x);
        load_pack<W>(a.dy + row * h, col, h, a.vector, g);  // 0 past the row end: no contribution
        load_pack<W>(a.weight, col, h, a.vector, w);
#pragma unroll
        for (int k = 0; k < W; ++k) w[k] += a.weight_offset;
      } else {
#pragma unroll
        for (int k = 0; k < W; ++k) x[k] = g[k] = w[k] = 0.0f;
      }
#pragma unroll
      for (int k = 0; k < W; ++k) {
        xhat[p][k] = (x[k] - mu) * rs;
        dxhat[p][k] = g[k] * w[k];
        sums[0] += dxhat[p][k];
        sums[1] += dxhat[p][k] * xhat[p][k];
        dweight[p][k] += g[k] * xhat[p][k];
        dbias[p][k] += g[k];
      }
    }
    group_sum<kGroup>(sums, scratch);
    const float mean_dxhat = sums[0] / static_cast<float>(h);
    const float mean_dxhat_xhat = sums[1] / static_cast<float>(h);
    if (!active) continue;
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int64_t col = pack_column<kGroup, W>(p);
      if (col >= h) break;
      float value[W], previous[W];
      if (a.accumulate) load_pack<W>(a.dx + row * h, col, h, a.vector, previous);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        value[k] = rs * (dxhat[p][k] - mean_dxhat - xhat[p][k] * mean_dxhat_xhat);
        if (a.accumulate) value[k] += previous[k];
      }
      store_pack<W>(a.dx + row * h, col, h, a.vector, value);
    }
  }
  // This block's partial column sums, groups added in order of threadIdx.y.
  float* partial_dweight = a.partials + blockIdx.x * 2 * h;
  float* partial_dbias = partial_dweight + h;
  if constexpr (R == 1) {
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int64_t col = pack_column<kGroup, W>(p);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        if (col + k < h) {
          partial_dweight[col + k] = dweight[p][k];
          partial_dbias[col + k] = dbias[p][k];
        }
      }
    }
  } else {
    for (int group = 0; group < R; ++group) {
      if (threadIdx.y == group) {
#pragma unroll
        for (int p = 0; p < kPacks; ++p) {
          const int64_t col = pack_column<kGroup, W>(p);
#pragma unroll
          for (int k = 0; k < W; ++k) {
            if (col + k < h) {
              column_sums[col + k] = group == 0 ? dweight[p][k] : column_sums[col + k] + dweight[p][k];
              column_sums[h + col + k] = group == 0 ? dbias[p][k] : column_sums[h + col + k] + dbias[p][k];
            }
          }
        }
      }
      __syncthreads();
    }
    const int thread = threadIdx.y * kGroup + threadIdx.x;
    for (int64_t c = thread; c < 2 * h; c += kThreadsPerBlock<kGroup, kBackwardBlock>) partial_dweight[c] = column_sums[c];
  }
}

// Rows too long for the registers: dx by one block per row (grid-stride), two passes; the weight
// and bias gradients by the generic column reduction.
template <typename T>
__global__ void layernorm_backward_dx_multipass_kernel(BackwardArgs<T> a) {
  const int64_t h = a.h;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const float mu = a.mean[row], rs = a.rstd[row];
    float sum_dxhat = 0.0f, sum_dxhat_xhat = 0.0f;
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      const float xhat = (to_float(a.x[row * h + j]) - mu) * rs;
      const float dxhat = to_float(a.dy[row * h + j]) * (to_float(a.weight[j]) + a.weight_offset);
      sum_dxhat += dxhat;
      sum_dxhat_xhat += dxhat * xhat;
    }
    const float mean_dxhat = block_sum(sum_dxhat) / static_cast<float>(h);
    const float mean_dxhat_xhat = block_sum(sum_dxhat_xhat) / static_cast<float>(h);
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      const float xhat = (to_float(a.x[row * h + j]) - mu) * rs;
      const float dxhat = to_float(a.dy[row * h + j]) * (to_float(a.weight[j]) + a.weight_offset);
      float value = rs * (dxhat - mean_dxhat - xhat * mean_dxhat_xhat);
      if (a.accumulate) value += to_float(a.dx[row * h + j]);
      a.dx[row * h + j] = from_float<T>(value);
    }
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
    return to_float(dy[row * h + col]) * ((to_float(x[row * h + col]) - mean[row]) * rstd[row]);
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
                    const Tensor& bias, float epsilon, float weight_offset) {
  const int64_t rows = x.rows(), h = x.cols();
  GPT_CHECK(y.numel() == x.numel() && weight.numel() == h && bias.numel() == h && mean.numel() == rows &&
            rstd.numel() == rows)
      << "LayerNorm shapes";
  GPT_CHECK(!delta_bias.defined() || delta_bias.numel() == h) << "LayerNorm residual bias " << delta_bias.to_string();
  if (rows == 0 || h == 0) return;
  ForwardArgs<T> a{device_data<T>(y), mean.data_as<float>(), rstd.data_as<float>(), optional_device_data<T>(residual),
                   device_data<T>(x), optional_device_data<T>(delta), optional_device_data<T>(delta_bias),
                   device_data<T>(weight), device_data<T>(bias), rows, h, epsilon, false, weight_offset};
  a.vector = rows_vectorizable(h, kPackSize<T>, {a.y, a.residual, a.x, a.delta, a.delta_bias, a.weight, a.bias});
  const bool in_registers = with_row_config<T, 512>(h, [&](auto group, auto packs) {
    constexpr int kGroup = decltype(group)::value, kPacks = decltype(packs)::value;
    constexpr int R = kRowsPerBlock<kGroup, kForwardBlock>;
    auto* kernel = layernorm_forward_kernel<T, kGroup, kPacks>;
    const unsigned int grid = occupancy_grid(ctx, kernel, kThreadsPerBlock<kGroup, kForwardBlock>, 0, (rows + R - 1) / R);
    kernel<<<grid, dim3(kGroup, R), 0, stream_of(ctx)>>>(a);
  });
  if (!in_registers) {
    const unsigned int grid = occupancy_grid(ctx, layernorm_forward_multipass_kernel<T>, kMultipassThreads, 0, rows);
    layernorm_forward_multipass_kernel<T><<<grid, kMultipassThreads, 0, stream_of(ctx)>>>(a);
  }
  GPT_CUDA_CHECK_LAUNCH();
}

template <typename T>
void launch_backward(Context& ctx, const Tensor& dx, const Tensor& dweight, const Tensor& dbias, const Tensor& dy,
                     const Tensor& x, const Tensor& mean, const Tensor& rstd, const Tensor& weight, bool accumulate,
                     float weight_offset) {
  const int64_t rows = x.rows(), h = x.cols();
  BackwardArgs<T> a{device_data<T>(dx), nullptr, device_data<T>(dy), device_data<T>(x), mean.data_as<float>(),
                    rstd.data_as<float>(), device_data<T>(weight), rows, h, accumulate, false, weight_offset};
  a.vector = rows_vectorizable(h, kPackSize<T>, {a.dx, a.dy, a.x, a.weight});
  const bool in_registers = with_row_config<T, 256>(h, [&](auto group, auto packs) {
    constexpr int kGroup = decltype(group)::value, kPacks = decltype(packs)::value;
    constexpr int R = kRowsPerBlock<kGroup, kBackwardBlock>;
    auto* kernel = layernorm_backward_kernel<T, kGroup, kPacks>;
    const size_t smem = R > 1 ? 2 * static_cast<size_t>(h) * sizeof(float) : 0;
    const unsigned int grid = occupancy_grid(ctx, kernel, kThreadsPerBlock<kGroup, kBackwardBlock>, smem, (rows + R - 1) / R);
    a.partials = static_cast<float*>(ctx.cuda().scratch(grid * 2 * static_cast<size_t>(h) * sizeof(float), "layernorm_backward"));
    kernel<<<grid, dim3(kGroup, R), smem, stream_of(ctx)>>>(a);
    GPT_CUDA_CHECK_LAUNCH();
    sum_partial_rows_into(ctx, a.partials, grid, 2 * h, h, dweight.data_as<float>());
    sum_partial_rows_into(ctx, a.partials + h, grid, 2 * h, h, dbias.data_as<float>());
  });
  if (in_registers) return;
  // The column sums first: they read dy, which dx may overwrite.
  auto* partials = static_cast<float*>(ctx.cuda().scratch(kRowChunks * h * sizeof(float), "layernorm_backward"));
  column_sums_into(ctx, WeightGradValue<T>{a.dy, a.x, a.mean, a.rstd, h}, rows, h, dweight.data_as<float>(), partials);
  column_sums_into(ctx, MatrixValue<T>{a.dy, h}, rows, h, dbias.data_as<float>(), partials);
  const unsigned int grid = occupancy_grid(ctx, layernorm_backward_dx_multipass_kernel<T>, kMultipassThreads, 0, rows);
  layernorm_backward_dx_multipass_kernel<T><<<grid, kMultipassThreads, 0, stream_of(ctx)>>>(a);
  GPT_CUDA_CHECK_LAUNCH();
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
    launch_backward<decltype(tag)>(ctx, dx, dweight, dbias, dy, x, mean, rstd, weight, accumulate_dx, weight_offset);
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
