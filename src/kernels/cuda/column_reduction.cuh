// Deterministic column sums of a [rows, cols] matrix into a float32 vector (+=), for bias gradients
// and the LayerNorm weight/bias gradients: blocks sum fixed row ranges into partial rows in scratch,
// then sum_partial_rows_into adds the partial rows in order. No atomics: the result is bitwise
// reproducible from run to run (the row ranges depend only on the shape and the device).
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda_kernels {

constexpr int kColumnTile = 32;     // lanes per block, along the columns
constexpr int kRowGroups = 8;       // warps per block, each summing a strided subset of rows
constexpr int kRowChunks = 64;      // row ranges of the generic column_sums_into
constexpr int kFinishRowGroups = 16;

// out[col] += sum over r in [0, partial_rows), in order of r, of partials[r * row_stride + col].
// Block: 32 columns x kFinishRowGroups warps, each adding every 16th partial row (four loads in
// flight), then the warps' totals added in order.
// (static: this header may be included by several translation units)
static __global__ void __launch_bounds__(kColumnTile * kFinishRowGroups)
    sum_partial_rows_kernel(const float* partials, int64_t partial_rows, int64_t row_stride, int64_t cols, float* out) {
  __shared__ float group_totals[kFinishRowGroups][kColumnTile];
  for (int64_t tile = blockIdx.x; tile * kColumnTile < cols; tile += gridDim.x) {
    const int64_t col = tile * kColumnTile + threadIdx.x;
    float total = 0.0f;
    if (col < cols) {
      int64_t r = threadIdx.y;
      for (; r + 3 * kFinishRowGroups < partial_rows; r += 4 * kFinishRowGroups) {
        float v[4];
#pragma unroll
        for (int u = 0; u < 4; ++u) v[u] = partials[(r + u * kFinishRowGroups) * row_stride + col];
#pragma unroll
        for (int u = 0; u < 4; ++u) total += v[u];
      }
      for (; r < partial_rows; r += kFinishRowGroups) total += partials[r * row_stride + col];
    }
    __syncthreads();  // the previous tile's totals are read
    group_totals[threadIdx.y][threadIdx.x] = total;
    __syncthreads();
    if (threadIdx.y == 0 && col < cols) {
      float sum = 0.0f;
      for (int g = 0; g < kFinishRowGroups; ++g) sum += group_totals[g][threadIdx.x];
      out[col] += sum;
    }
  }
}

inline void sum_partial_rows_into(Context& ctx, const float* partials, int64_t partial_rows, int64_t row_stride,
                                  int64_t cols, float* out) {
  if (cols == 0) return;
  const dim3 block(kColumnTile, kFinishRowGroups);
  const int64_t tiles = (cols + kColumnTile - 1) / kColumnTile;
  const unsigned int grid = static_cast<unsigned int>(tiles < 65535 ? tiles : 65535);
  sum_partial_rows_kernel<<<grid, block, 0, stream_of(ctx)>>>(partials, partial_rows, row_stride, cols, out);
  GPT_CUDA_CHECK_LAUNCH();
}

// partials[chunk, col] = sum over rows of `chunk` of value(row, col), for any value functor.
template <typename Value>
__global__ void column_partials_kernel(Value value, int64_t rows, int64_t cols, float* partials) {
  const int64_t col = blockIdx.x * static_cast<int64_t>(kColumnTile) + threadIdx.x;
  const int64_t rows_per_chunk = (rows + gridDim.y - 1) / gridDim.y;
  const int64_t begin = blockIdx.y * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  float total = 0.0f;
  if (col < cols) {
    for (int64_t row = begin + threadIdx.y; row < end; row += kRowGroups) total += value(row, col);
  }
  __shared__ float warp_totals[kRowGroups][kColumnTile];
  warp_totals[threadIdx.y][threadIdx.x] = total;
  __syncthreads();
  if (threadIdx.y == 0 && col < cols) {
    float chunk_total = 0.0f;
    for (int g = 0; g < kRowGroups; ++g) chunk_total += warp_totals[g][threadIdx.x];
    partials[blockIdx.y * cols + col] = chunk_total;
  }
}

// out [cols] += column sums of value(row, col); partials: scratch of kRowChunks * cols floats.
template <typename Value>
void column_sums_into(Context& ctx, Value value, int64_t rows, int64_t cols, float* out, float* partials) {
  if (cols == 0) return;
  const dim3 block(kColumnTile, kRowGroups);
  const dim3 grid(static_cast<unsigned int>((cols + kColumnTile - 1) / kColumnTile), kRowChunks);
  column_partials_kernel<<<grid, block, 0, stream_of(ctx)>>>(value, rows, cols, partials);
  GPT_CUDA_CHECK_LAUNCH();
  sum_partial_rows_into(ctx, partials, kRowChunks, cols, cols, out);
}

// The same for a stored matrix, vectorized: each lane sums a pack of kPackSize<T> columns (one
// 16-byte load per row) when `vector` (cols a multiple of the pack, 16-byte aligned rows), one
// element at a time otherwise. Block: 32 lanes x kRowGroups warps over one row chunk (blockIdx.y).
template <typename T>
__global__ void __launch_bounds__(kColumnTile * kRowGroups)
    matrix_column_partials_kernel(const T* matrix, int64_t rows, int64_t cols, int64_t rows_per_chunk, bool vector,
                                  float* partials) {
  constexpr int W = kPackSize<T>;
  constexpr int kTileCols = kColumnTile * W;
  __shared__ float group_sums[kRowGroups][kTileCols];
  const int64_t tile_start = blockIdx.x * static_cast<int64_t>(kTileCols);
  const int64_t col = tile_start + threadIdx.x * static_cast<int64_t>(W);
  const int64_t begin = blockIdx.y * rows_per_chunk;
  const int64_t end = begin + rows_per_chunk < rows ? begin + rows_per_chunk : rows;
  auto load_row = [&](int64_t row, float (&v)[W]) {
    const T* row_data = matrix + row * cols;
    if (vector) {
      if (col < cols) {
        load_floats<W>(row_data + col, v);
      } else {
#pragma unroll
        for (int k = 0; k < W; ++k) v[k] = 0.0f;
      }
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) v[k] = col + k < cols ? to_float(row_data[col + k]) : 0.0f;
    }
  };
  float total[W] = {};
  int64_t row = begin + threadIdx.y;
  for (; row + 3 * kRowGroups < end; row += 4 * kRowGroups) {  // four loads in flight, added in row order
    float v[4][W];
#pragma unroll
    for (int u = 0; u < 4; ++u) load_row(row + u * kRowGroups, v[u]);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
#pragma unroll
      for (int k = 0; k < W; ++k) total[k] += v[u][k];
    }
  }
  for (; row < end; row += kRowGroups) {
    float v[W];
    load_row(row, v);
#pragma unroll
    for (int k = 0; k < W; ++k) total[k] += v[k];
  }
#pragma unroll
  for (int k = 0; k < W; ++k) group_sums[threadIdx.y][threadIdx.x * W + k] = total[k];
  __syncthreads();
  const int thread = threadIdx.y * kColumnTile + threadIdx.x;
  for (int c = thread; c < kTileCols; c += kColumnTile * kRowGroups) {
    float sum = 0.0f;
    for (int g = 0; g < kRowGroups; ++g) sum += group_sums[g][c];
    if (tile_start + c < cols) partials[blockIdx.y * cols + tile_start + c] = sum;
  }
}

// out [cols] += column sums of matrix [rows, cols] (T = float or bf16). Scratch: partial rows.
template <typename T>
void matrix_column_sums_into(Context& ctx, const T* matrix, int64_t rows, int64_t cols, float* out, const char* op) {
  if (cols == 0) return;
  constexpr int W = kPackSize<T>;
  const int64_t tiles = (cols + kColumnTile * W - 1) / (kColumnTile * W);
  // About four blocks per multiprocessor in all; each chunk at least kRowGroups rows.
  const int64_t wanted = (4 * static_cast<int64_t>(ctx.cuda().multiprocessor_count()) + tiles - 1) / tiles;
  const int64_t max_chunks = (rows + kRowGroups - 1) / kRowGroups;
  int64_t chunks = wanted < max_chunks ? wanted : max_chunks;
  chunks = chunks < 1 ? 1 : (chunks > 65535 ? 65535 : chunks);
  const int64_t rows_per_chunk = (rows + chunks - 1) / chunks;
  auto* partials = static_cast<float*>(ctx.cuda().scratch(static_cast<size_t>(chunks * cols) * sizeof(float), op));
  const bool vector = rows_vectorizable(cols, W, {matrix});
  GPT_CHECK(tiles <= 0x7fffffff) << op << ": too many columns";
  const dim3 grid(static_cast<unsigned int>(tiles), static_cast<unsigned int>(chunks));
  matrix_column_partials_kernel<T><<<grid, dim3(kColumnTile, kRowGroups), 0, stream_of(ctx)>>>(
      matrix, rows, cols, rows_per_chunk, vector, partials);
  GPT_CUDA_CHECK_LAUNCH();
  sum_partial_rows_into(ctx, partials, chunks, cols, cols, out);
}

}  // namespace gpt::cuda_kernels
