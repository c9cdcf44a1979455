// Deterministic column sums of a [rows, cols] matrix into a float32 vector (+=): blocks of a fixed
// row range write partial column sums to scratch, then a second kernel adds the partials in order.
// Used for bias gradients and LayerNorm weight/bias gradients.
#pragma once

#include "kernels/cuda/common.cuh"

namespace gpt::cuda_kernels {

constexpr int kColumnTile = 32;     // columns per block (one per lane)
constexpr int kRowGroups = 8;       // warps per block, each summing a strided subset of rows
constexpr int kRowChunks = 64;      // row ranges (grid.y); partials are [kRowChunks, cols]

// partials[chunk, col] = sum over rows of `chunk` of value(row, col).
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

__global__ void column_finish_kernel(const float* partials, int chunks, int64_t cols, float* out) {
  const int64_t col = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (col >= cols) return;
  float total = 0.0f;
  for (int c = 0; c < chunks; ++c) total += partials[c * cols + col];
  out[col] += total;
}

template <typename Value>
void column_sums_into(Context& ctx, Value value, int64_t rows, int64_t cols, float* out, float* partials) {
  const dim3 block(kColumnTile, kRowGroups);
  const dim3 grid(static_cast<unsigned int>((cols + kColumnTile - 1) / kColumnTile), kRowChunks);
  column_partials_kernel<<<grid, block, 0, stream_of(ctx)>>>(value, rows, cols, partials);
  GPT_CUDA_CHECK_LAUNCH();
  column_finish_kernel<<<grid_for(cols, 256), 256, 0, stream_of(ctx)>>>(partials, kRowChunks, cols, out);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt::cuda_kernels
