// The row-normalization kernels and launchers LayerNorm and RMSNorm share (layernorm.cu,
// rmsnorm.cu), with the statistic as a policy S. Forward (optionally fused with the residual add
// before it) and backward, FP32 statistics. A group of kGroup threads owns a row and keeps it in
// registers (kPacks packs of 16 bytes per thread, row_norm.cuh), so forward reads x (and delta)
// once and writes y (and the residual) once, and backward reads dy and x once and writes dx once
// while also accumulating the weight (and bias) gradients of its rows; those per-block partials are
// added in a fixed order afterwards (deterministic, no atomics). Rows too long for registers take a
// multi-pass path.
//
// The policy S (LayerNormStatistic, RmsNormStatistic) states what differs, as static members:
//   kCentered           the mean is subtracted and kept, and there is a bias (LayerNorm)
//   kSums               how many per-row sums backward needs for dx
//   kScratch            the label of backward's scratch
//   of_packs<kGroup>(v, active, h, epsilon, scratch) -> RowStatistics   forward, rows in registers
//   add_first_pass(acc, v); of_row(acc, source, h, epsilon)           forward, multi-pass
//   xhat(x, mean, rstd), scale(xhat, w, b)                            the normalized value, y
//   add_sums(sums, dxhat, xhat), means(sums, h) -> Means,
//   dx(rstd, dxhat, xhat, means)                                      backward
// Each is a whole FP32 expression at its place in the kernels, which add nothing around it: a
// statistic's arithmetic and accumulation order are its policy's alone.
#pragma once

#include "kernels/cuda/column_reduction.cuh"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/row_norm.cuh"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda_kernels {

struct RowStatistics {
  float mean;  // 0 when the statistic is not centred
  float rstd;
};

template <typename T>
struct RowNormForward {
  T* y;
  float* mean;  // [rows], centred statistics only
  float* rstd;  // [rows]
  T* residual;  // written when delta is given
  const T* x;
  const T* delta;       // optional
  const T* delta_bias;  // optional, [h]
  const T* weight;
  const T* bias;  // centred statistics only
  int64_t rows, h;
  float epsilon;
  bool vector;
  float weight_offset;  // added to the weight as read: 1 for a zero-centred weight
};

template <typename T>
struct RowNormBackward {
  T* dx;
  float* partials;  // [gridDim.x, grads, h]: each block's dweight sums, then (centred) its dbias sums
  const T* dy;
  const T* x;
  const float* mean;  // centred statistics only
  const float* rstd;
  const T* weight;
  int64_t rows, h;
  bool accumulate;
  bool vector;
  float weight_offset;  // added to the weight as read: 1 for a zero-centred weight
};

// The weight gradient and, centred, the bias gradient.
template <typename S>
constexpr int kNormGrads = S::kCentered ? 2 : 1;

// y = S(x) where x = a + delta + delta_bias when delta is given (then also written to residual,
// rounded to T: the statistics are those of the stored residual, which backward will read).
// Outputs may alias inputs: each element is read and then written by the same thread.
template <typename S, typename T, int kGroup, int kPacks>
__global__ void __launch_bounds__(kThreadsPerBlock<kGroup, kForwardBlock>) row_norm_forward_kernel(RowNormForward<T> a) {
  constexpr int W = kPackSize<T>;
  constexpr int R = kRowsPerBlock<kGroup, kForwardBlock>;
  __shared__ float scratch[R * (kGroup / 32)];
  const int64_t h = a.h;
  for (int64_t first = blockIdx.x * static_cast<int64_t>(R); first < a.rows; first += static_cast<int64_t>(gridDim.x) * R) {
    const int64_t row = first + threadIdx.y;
    const bool active = row < a.rows;
    float v[kPacks][W];
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
    }
    const RowStatistics s = S::template of_packs<kGroup>(v, active, h, a.epsilon, scratch);  // v: 0 past the row end
    if (!active) continue;
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int64_t col = pack_column<kGroup, W>(p);
      if (col >= h) break;
      float w[W], b[W] = {}, out[W];
      load_pack<W>(a.weight, col, h, a.vector, w);
#pragma unroll
      for (int k = 0; k < W; ++k) w[k] += a.weight_offset;
      if constexpr (S::kCentered) load_pack<W>(a.bias, col, h, a.vector, b);
#pragma unroll
      for (int k = 0; k < W; ++k) out[k] = S::scale(S::xhat(v[p][k], s.mean, s.rstd), w[k], b[k]);
      store_pack<W>(a.y + row * h, col, h, a.vector, out);
    }
    if (threadIdx.x == 0) {
      if constexpr (S::kCentered) a.mean[row] = s.mean;
      a.rstd[row] = s.rstd;
    }
  }
}

// Rows too long for the registers: one block per row (grid-stride), a pass for the residual and the
// first sum, then the statistic's further passes and one for y.
template <typename S, typename T>
__global__ void row_norm_forward_multipass_kernel(RowNormForward<T> a) {
  const int64_t h = a.h;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const T* x_row = a.x + row * h;
    float first_pass = 0.0f;
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      float v = to_float(x_row[j]);
      if (a.delta) {
        v = to_float(from_float<T>(v + to_float(a.delta[row * h + j]) + (a.delta_bias ? to_float(a.delta_bias[j]) : 0.0f)));
        a.residual[row * h + j] = from_float<T>(v);
      }
      S::add_first_pass(first_pass, v);
    }
    const T* source = a.delta ? a.residual + row * h : x_row;
    const RowStatistics s = S::of_row(first_pass, source, h, a.epsilon);  // its barriers publish the residual
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      const float normalized = S::xhat(to_float(source[j]), s.mean, s.rstd);
      const float bias = S::kCentered ? to_float(a.bias[j]) : 0.0f;
      a.y[row * h + j] = from_float<T>(S::scale(normalized, to_float(a.weight[j]) + a.weight_offset, bias));
    }
    if (threadIdx.x == 0) {
      if constexpr (S::kCentered) a.mean[row] = s.mean;
      a.rstd[row] = s.rstd;
    }
  }
}

// dx = S's input gradient with xhat = S::xhat(x), dxhat = dy * weight (+= when accumulating). Each
// thread also sums dy * xhat (and, centred, dy) over its rows for its columns; the groups of a
// block then add theirs in order into shared memory, and the block writes one partial row per
// gradient. dx may alias dy: both are read into registers before dx is written.
template <typename S, typename T, int kGroup, int kPacks>
__global__ void __launch_bounds__(kThreadsPerBlock<kGroup, kBackwardBlock>) row_norm_backward_kernel(RowNormBackward<T> a) {
  constexpr int W = kPackSize<T>;
  constexpr int R = kRowsPerBlock<kGroup, kBackwardBlock>;
  constexpr int G = kNormGrads<S>;
  extern __shared__ float column_sums[];  // [G, h], only when R > 1
  __shared__ float scratch[R * (kGroup / 32) * S::kSums];
  const int64_t h = a.h;
  float dweight[kPacks][W] = {}, dbias[kPacks][W] = {};  // dbias: centred only
  for (int64_t first = blockIdx.x * static_cast<int64_t>(R); first < a.rows; first += static_cast<int64_t>(gridDim.x) * R) {
    const int64_t row = first + threadIdx.y;
    const bool active = row < a.rows;
    float mu = 0.0f;
    if constexpr (S::kCentered) mu = active ? a.mean[row] : 0.0f;
    const float rs = active ? a.rstd[row] : 0.0f;
    float xhat[kPacks][W], dxhat[kPacks][W];
    float sums[S::kSums] = {};
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
        xhat[p][k] = S::xhat(x[k], mu, rs);
        dxhat[p][k] = g[k] * w[k];
        S::add_sums(sums, dxhat[p][k], xhat[p][k]);
        dweight[p][k] += g[k] * xhat[p][k];
        if constexpr (S::kCentered) dbias[p][k] += g[k];
      }
    }
    group_sum<kGroup>(sums, scratch);
    const typename S::Means means = S::means(sums, h);
    if (!active) continue;
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int64_t col = pack_column<kGroup, W>(p);
      if (col >= h) break;
      float value[W], previous[W];
      if (a.accumulate) load_pack<W>(a.dx + row * h, col, h, a.vector, previous);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        value[k] = S::dx(rs, dxhat[p][k], xhat[p][k], means);
        if (a.accumulate) value[k] += previous[k];
      }
      store_pack<W>(a.dx + row * h, col, h, a.vector, value);
    }
  }
  // This block's partial column sums, groups added in order of threadIdx.y.
  float* partial_dweight = a.partials + blockIdx.x * G * h;
  float* partial_dbias = partial_dweight + h;
  if constexpr (R == 1) {
#pragma unroll
    for (int p = 0; p < kPacks; ++p) {
      const int64_t col = pack_column<kGroup, W>(p);
#pragma unroll
      for (int k = 0; k < W; ++k) {
        if (col + k < h) {
          partial_dweight[col + k] = dweight[p][k];
          if constexpr (S::kCentered) partial_dbias[col + k] = dbias[p][k];
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
              if constexpr (S::kCentered) {
                column_sums[h + col + k] = group == 0 ? dbias[p][k] : column_sums[h + col + k] + dbias[p][k];
              }
            }
          }
        }
      }
      __syncthreads();
    }
    const int thread = threadIdx.y * kGroup + threadIdx.x;
    for (int64_t c = thread; c < G * h; c += kThreadsPerBlock<kGroup, kBackwardBlock>) partial_dweight[c] = column_sums[c];
  }
}

// Rows too long for the registers: dx by one block per row (grid-stride), two passes; the weight
// and bias gradients by the generic column reduction.
template <typename S, typename T>
__global__ void row_norm_backward_dx_multipass_kernel(RowNormBackward<T> a) {
  const int64_t h = a.h;
  for (int64_t row = blockIdx.x; row < a.rows; row += gridDim.x) {
    const float mu = S::kCentered ? a.mean[row] : 0.0f, rs = a.rstd[row];
    float sums[S::kSums] = {};
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      const float xhat = S::xhat(to_float(a.x[row * h + j]), mu, rs);
      const float dxhat = to_float(a.dy[row * h + j]) * (to_float(a.weight[j]) + a.weight_offset);
      S::add_sums(sums, dxhat, xhat);
    }
#pragma unroll
    for (int c = 0; c < S::kSums; ++c) sums[c] = block_sum(sums[c]);
    const typename S::Means means = S::means(sums, h);
    for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
      const float xhat = S::xhat(to_float(a.x[row * h + j]), mu, rs);
      const float dxhat = to_float(a.dy[row * h + j]) * (to_float(a.weight[j]) + a.weight_offset);
      float value = S::dx(rs, dxhat, xhat, means);
      if (a.accumulate) value += to_float(a.dx[row * h + j]);
      a.dx[row * h + j] = from_float<T>(value);
    }
  }
}

template <typename S, typename T>
struct NormWeightGradValue {  // dy * xhat
  const T* dy;
  const T* x;
  const float* mean;  // centred statistics only
  const float* rstd;
  int64_t h;
  __device__ float operator()(int64_t row, int64_t col) const {
    return to_float(dy[row * h + col]) * S::xhat(to_float(x[row * h + col]), S::kCentered ? mean[row] : 0.0f, rstd[row]);
  }
};

template <typename T>
struct MatrixValue {
  const T* data;
  int64_t cols;
  __device__ float operator()(int64_t row, int64_t col) const { return to_float(data[row * cols + col]); }
};

// Launches forward for a [rows, h] input with rows, h > 0 (the caller checked the shapes).
template <typename S, typename T>
void launch_row_norm_forward(Context& ctx, RowNormForward<T> a) {
  const int64_t rows = a.rows, h = a.h;
  a.vector = rows_vectorizable(h, kPackSize<T>, {a.y, a.residual, a.x, a.delta, a.delta_bias, a.weight, a.bias});
  const bool in_registers = with_row_config<T, 512>(h, [&](auto group, auto packs) {
    constexpr int kGroup = decltype(group)::value, kPacks = decltype(packs)::value;
    constexpr int R = kRowsPerBlock<kGroup, kForwardBlock>;
    auto* kernel = row_norm_forward_kernel<S, T, kGroup, kPacks>;
    const unsigned int grid = occupancy_grid(ctx, kernel, kThreadsPerBlock<kGroup, kForwardBlock>, 0, (rows + R - 1) / R);
    kernel<<<grid, dim3(kGroup, R), 0, stream_of(ctx)>>>(a);
  });
  if (!in_registers) {
    auto* kernel = row_norm_forward_multipass_kernel<S, T>;
    const unsigned int grid = occupancy_grid(ctx, kernel, kMultipassThreads, 0, rows);
    kernel<<<grid, kMultipassThreads, 0, stream_of(ctx)>>>(a);
  }
  GPT_CUDA_CHECK_LAUNCH();
}

// Launches backward for a [rows, h] input with rows, h > 0: dx, and dweight [h] (and, centred,
// dbias [h]) float32 += the column sums.
template <typename S, typename T>
void launch_row_norm_backward(Context& ctx, RowNormBackward<T> a, float* dweight, float* dbias) {
  constexpr int G = kNormGrads<S>;
  const int64_t rows = a.rows, h = a.h;
  a.vector = rows_vectorizable(h, kPackSize<T>, {a.dx, a.dy, a.x, a.weight});
  const bool in_registers = with_row_config<T, 256>(h, [&](auto group, auto packs) {
    constexpr int kGroup = decltype(group)::value, kPacks = decltype(packs)::value;
    constexpr int R = kRowsPerBlock<kGroup, kBackwardBlock>;
    auto* kernel = row_norm_backward_kernel<S, T, kGroup, kPacks>;
    const size_t smem = R > 1 ? G * static_cast<size_t>(h) * sizeof(float) : 0;
    const unsigned int grid = occupancy_grid(ctx, kernel, kThreadsPerBlock<kGroup, kBackwardBlock>, smem, (rows + R - 1) / R);
    a.partials = static_cast<float*>(ctx.cuda().scratch(grid * G * static_cast<size_t>(h) * sizeof(float), S::kScratch));
    kernel<<<grid, dim3(kGroup, R), smem, stream_of(ctx)>>>(a);
    GPT_CUDA_CHECK_LAUNCH();
    sum_partial_rows_into(ctx, a.partials, grid, G * h, h, dweight);
    if constexpr (S::kCentered) sum_partial_rows_into(ctx, a.partials + h, grid, G * h, h, dbias);
  });
  if (in_registers) return;
  // The column sums first: they read dy, which dx may overwrite.
  auto* partials = static_cast<float*>(ctx.cuda().scratch(kRowChunks * h * sizeof(float), S::kScratch));
  column_sums_into(ctx, NormWeightGradValue<S, T>{a.dy, a.x, a.mean, a.rstd, h}, rows, h, dweight, partials);
  if constexpr (S::kCentered) column_sums_into(ctx, MatrixValue<T>{a.dy, h}, rows, h, dbias, partials);
  auto* kernel = row_norm_backward_dx_multipass_kernel<S, T>;
  const unsigned int grid = occupancy_grid(ctx, kernel, kMultipassThreads, 0, rows);
  kernel<<<grid, kMultipassThreads, 0, stream_of(ctx)>>>(a);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt::cuda_kernels
