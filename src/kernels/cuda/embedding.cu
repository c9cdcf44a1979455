// Token and position embeddings: one warp per row (grid-stride), lanes over 16-byte packs of the
// row when rows are aligned and h is a multiple of the pack, element by element otherwise. The
// token-embedding gradient is deterministic: rows are stably sorted by their token's local id
// (CUB radix sort over only the bits the shard needs), then each token's rows are summed in row
// order by one block.
#include <cub/cub.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kWarpsPerBlock = 8;
constexpr int kThreads = 256;

// Calls fn(Width<W>{}, col) for the packs of a row of h elements this lane owns (W = the pack
// width when `vector`, else 1).
template <int kPack, typename Fn>
__device__ __forceinline__ void for_each_lane_pack(int64_t h, bool vector, Fn&& fn) {
  const int lane = threadIdx.x;
  if (vector) {
    for (int64_t col = lane * static_cast<int64_t>(kPack); col < h; col += 32 * kPack) fn(Width<kPack>{}, col);
  } else {
    for (int64_t col = lane; col < h; col += 32) fn(Width<1>{}, col);
  }
}

// Rows row = blockIdx.x * kWarpsPerBlock + threadIdx.y, then grid-stride.
#define GPT_FOR_EACH_WARP_ROW(row, rows)                                                                  \
  for (int64_t row = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.y; row < (rows); \
       row += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock)

unsigned int warp_row_grid(Context& ctx, int64_t rows) { return resident_grid(ctx, rows * 32, kThreads); }

template <typename T>
__global__ void __launch_bounds__(kThreads) embedding_forward_kernel(T* out, const int32_t* tokens, const T* table,
                                                                     int64_t rows, int64_t h, int64_t vocab_start,
                                                                     int64_t local_vocab, bool vector) {
  GPT_FOR_EACH_WARP_ROW(row, rows) {
    const int64_t local = static_cast<int64_t>(tokens[row]) - vocab_start;
    const bool here = local >= 0 && local < local_vocab;
    for_each_lane_pack<kPackSize<T>>(h, vector, [&](auto width, int64_t col) {
      constexpr int W = decltype(width)::value;
      float v[W];
      if (here) {
        load_floats<W>(table + local * h + col, v);  // a copy: float holds every T exactly
      } else {
#pragma unroll
        for (int k = 0; k < W; ++k) v[k] = 0.0f;
      }
      store_floats<W>(out + row * h + col, v);
    });
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) position_forward_kernel(T* out, const T* table, int64_t rows, int64_t h,
                                                                    int64_t batch, int64_t offset, bool vector) {
  GPT_FOR_EACH_WARP_ROW(row, rows) {
    const int64_t position = offset + row / batch;
    for_each_lane_pack<kPackSize<T>>(h, vector, [&](auto width, int64_t col) {
      constexpr int W = decltype(width)::value;
      float v[W], p[W];
      load_floats<W>(out + row * h + col, v);
      load_floats<W>(table + position * h + col, p);
#pragma unroll
      for (int k = 0; k < W; ++k) v[k] = v[k] + p[k];
      store_floats<W>(out + row * h + col, v);
    });
  }
}

// dtable[offset + p, :] += sum over the batch of dout[p * batch + b, :], in batch order.
template <typename T>
__global__ void __launch_bounds__(kThreads) position_backward_kernel(float* dtable, const T* dout, int64_t positions,
                                                                     int64_t h, int64_t batch, int64_t offset,
                                                                     bool vector) {
  GPT_FOR_EACH_WARP_ROW(p, positions) {
    for_each_lane_pack<kPackSize<T>>(h, vector, [&](auto width, int64_t col) {
      constexpr int W = decltype(width)::value;
      float total[W] = {};
      for (int64_t b = 0; b < batch; ++b) {
        float v[W];
        load_floats<W>(dout + (p * batch + b) * h + col, v);
#pragma unroll
        for (int k = 0; k < W; ++k) total[k] += v[k];
      }
      float* target = dtable + (offset + p) * h + col;
      float previous[W];
      load_floats<W>(target, previous);
#pragma unroll
      for (int k = 0; k < W; ++k) previous[k] += total[k];
      store_floats<W>(target, previous);
    });
  }
}

// Sort keys: the token's local id in this shard, or local_vocab for tokens of other shards (they
// sort last and are skipped). Values: the row indices 0..n-1.
__global__ void sort_keys_kernel(uint32_t* keys, int32_t* rows, const int32_t* tokens, int64_t n, int64_t vocab_start,
                                 int64_t local_vocab) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t local = static_cast<int64_t>(tokens[i]) - vocab_start;
    keys[i] = static_cast<uint32_t>(local >= 0 && local < local_vocab ? local : local_vocab);
    rows[i] = static_cast<int32_t>(i);
  }
}

// A block per sorted position that starts a run of equal keys (grid-stride over positions); lanes
// over packs of h, each summing the run's rows in row order (the sort is stable).
template <typename T>
__global__ void __launch_bounds__(kThreads) token_backward_kernel(float* dtable, const T* dout, const uint32_t* keys,
                                                                  const int32_t* sorted_rows, int64_t n, int64_t h,
                                                                  int64_t local_vocab, bool vector) {
  constexpr int kPack = kPackSize<T>;
  for (int64_t start = blockIdx.x; start < n; start += gridDim.x) {
    const uint32_t key = keys[start];
    if (key >= local_vocab || (start > 0 && keys[start - 1] == key)) continue;
    int64_t end = start + 1;
    while (end < n && keys[end] == key) ++end;
    float* target_row = dtable + static_cast<int64_t>(key) * h;
    auto accumulate = [&](auto width, int64_t col) {
      constexpr int W = decltype(width)::value;
      float total[W] = {};
      int64_t i = start;
      for (; i + 3 < end; i += 4) {  // four rows' loads in flight, still added in row order
        float v[4][W];
#pragma unroll
        for (int u = 0; u < 4; ++u) load_floats<W>(dout + static_cast<int64_t>(sorted_rows[i + u]) * h + col, v[u]);
#pragma unroll
        for (int u = 0; u < 4; ++u) {
#pragma unroll
          for (int k = 0; k < W; ++k) total[k] += v[u][k];
        }
      }
      for (; i < end; ++i) {
        float v[W];
        load_floats<W>(dout + static_cast<int64_t>(sorted_rows[i]) * h + col, v);
#pragma unroll
        for (int k = 0; k < W; ++k) total[k] += v[k];
      }
      float previous[W];
      load_floats<W>(target_row + col, previous);
#pragma unroll
      for (int k = 0; k < W; ++k) previous[k] += total[k];
      store_floats<W>(target_row + col, previous);
    };
    if (vector) {
      for (int64_t col = threadIdx.x * static_cast<int64_t>(kPack); col < h; col += static_cast<int64_t>(blockDim.x) * kPack) {
        accumulate(Width<kPack>{}, col);
      }
    } else {
      for (int64_t col = threadIdx.x; col < h; col += blockDim.x) accumulate(Width<1>{}, col);
    }
  }
}

int bits_for(int64_t value) {
  int bits = 1;
  while (bits < 32 && (int64_t{1} << bits) <= value) ++bits;
  return bits;
}

}  // namespace

void embedding_forward(Context& ctx, const Tensor& out, const Tensor& tokens, const Tensor& table, int64_t vocab_start) {
  const int64_t rows = tokens.numel(), h = table.cols();
  GPT_CHECK(out.rows() == rows && out.cols() == h && out.dtype() == table.dtype()) << "embedding output";
  if (rows == 0) return;
  dispatch_float_type(table.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const bool vector = rows_vectorizable(h, kPackSize<T>, {out.data(), table.data()});
    embedding_forward_kernel<T><<<warp_row_grid(ctx, rows), dim3(32, kWarpsPerBlock), 0, stream_of(ctx)>>>(
        device_data<T>(out), tokens.data_as<int32_t>(), device_data<T>(table), rows, h, vocab_start, table.rows(),
        vector);
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void embedding_backward(Context& ctx, const Tensor& dtable, const Tensor& dout, const Tensor& tokens,
                        int64_t vocab_start) {
  const int64_t n = tokens.numel(), h = dtable.cols(), local_vocab = dtable.rows();
  GPT_CHECK(dout.rows() == n && dout.cols() == h) << "embedding backward shapes";
  GPT_CHECK(n <= 0x7fffffff && local_vocab < (int64_t{1} << 32)) << "embedding backward sizes";
  if (n == 0) return;
  // Scratch: keys and row indices in and out, then CUB's temporary storage.
  const int end_bit = bits_for(local_vocab);  // keys are <= local_vocab
  size_t temp_bytes = 0;
  GPT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const uint32_t*>(nullptr),
                                                 static_cast<uint32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                                 static_cast<int32_t*>(nullptr), static_cast<int>(n), 0, end_bit));
  const size_t ints = static_cast<size_t>(n);
  const size_t index_bytes = ((4 * ints * sizeof(int32_t) + 255) / 256) * 256;
  auto* base = static_cast<char*>(ctx.cuda().scratch(index_bytes + temp_bytes, "embedding_backward"));
  auto* keys_in = reinterpret_cast<uint32_t*>(base);
  auto* keys_out = keys_in + ints;
  auto* rows_in = reinterpret_cast<int32_t*>(keys_out + ints);
  auto* rows_out = rows_in + ints;
  void* temp = base + index_bytes;
  sort_keys_kernel<<<resident_grid(ctx, n, kThreads), kThreads, 0, stream_of(ctx)>>>(
      keys_in, rows_in, tokens.data_as<int32_t>(), n, vocab_start, local_vocab);
  GPT_CUDA_CHECK_LAUNCH();
  GPT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, keys_in, keys_out, rows_in, rows_out,
                                                 static_cast<int>(n), 0, end_bit, stream_of(ctx)));
  dispatch_float_type(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const bool vector = rows_vectorizable(h, kPackSize<T>, {dtable.data(), dout.data()});
    const unsigned int grid = occupancy_grid(ctx, token_backward_kernel<T>, kThreads, 0, n);
    token_backward_kernel<T><<<grid, kThreads, 0, stream_of(ctx)>>>(dtable.data_as<float>(), device_data<T>(dout),
                                                                    keys_out, rows_out, n, h, local_vocab, vector);
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void position_embedding_forward(Context& ctx, const Tensor& out, const Tensor& table, int64_t batch,
                                int64_t position_offset) {
  const int64_t rows = out.rows(), h = out.cols();
  GPT_CHECK(batch > 0 && table.cols() == h && rows % batch == 0 && position_offset >= 0 &&
            position_offset + rows / batch <= table.rows())
      << "position embedding shapes";
  if (rows == 0) return;
  dispatch_float_type(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const bool vector = rows_vectorizable(h, kPackSize<T>, {out.data(), table.data()});
    position_forward_kernel<T><<<warp_row_grid(ctx, rows), dim3(32, kWarpsPerBlock), 0, stream_of(ctx)>>>(
        device_data<T>(out), device_data<T>(table), rows, h, batch, position_offset, vector);
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void position_embedding_backward(Context& ctx, const Tensor& dtable, const Tensor& dout, int64_t batch,
                                 int64_t position_offset) {
  const int64_t rows = dout.rows(), h = dout.cols();
  GPT_CHECK(batch > 0 && dtable.cols() == h && rows % batch == 0 && position_offset >= 0 &&
            position_offset + rows / batch <= dtable.rows())
      << "position embedding backward shapes";
  if (rows == 0) return;
  dispatch_float_type(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const bool vector = rows_vectorizable(h, kPackSize<T>, {dtable.data(), dout.data()});
    position_backward_kernel<T><<<warp_row_grid(ctx, rows / batch), dim3(32, kWarpsPerBlock), 0, stream_of(ctx)>>>(
        dtable.data_as<float>(), device_data<T>(dout), rows / batch, h, batch, position_offset, vector);
  });
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt::cuda_ops
