// Token and position embeddings. The token-embedding gradient is deterministic: rows are stably
// sorted by token id (CUB radix sort), then each token's rows are summed in row order.
#include <cub/cub.cuh>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kThreads = 256;

template <typename T>
__global__ void embedding_forward_kernel(T* out, const int32_t* tokens, const T* table, int64_t rows, int64_t h,
                                         int64_t vocab_start, int64_t local_vocab) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * h;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t row = i / h, j = i % h;
    const int64_t local = static_cast<int64_t>(tokens[row]) - vocab_start;
    out[i] = (local >= 0 && local < local_vocab) ? table[local * h + j] : from_float<T>(0.0f);
  }
}

template <typename T>
__global__ void position_forward_kernel(T* out, const T* table, int64_t rows, int64_t h, int64_t batch,
                                        int64_t offset) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < rows * h;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t position = offset + (i / h) / batch, j = i % h;
    out[i] = from_float<T>(to_float(out[i]) + to_float(table[position * h + j]));
  }
}

// dtable[offset + p, j] += sum over the batch of dout[p * batch + b, j], in batch order.
template <typename T>
__global__ void position_backward_kernel(float* dtable, const T* dout, int64_t positions, int64_t h, int64_t batch,
                                         int64_t offset) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < positions * h;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    const int64_t p = i / h, j = i % h;
    float total = 0.0f;
    for (int64_t b = 0; b < batch; ++b) total += to_float(dout[(p * batch + b) * h + j]);
    dtable[(offset + p) * h + j] += total;
  }
}

__global__ void iota_kernel(int32_t* values, int64_t n) {
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    values[i] = static_cast<int32_t>(i);
  }
}

// Block x handles sorted position x when it starts a run of equal tokens; threads cover columns.
template <typename T>
__global__ void token_backward_kernel(float* dtable, const T* dout, const int32_t* sorted_tokens,
                                      const int32_t* sorted_rows, int64_t n, int64_t h, int64_t vocab_start,
                                      int64_t local_vocab) {
  const int64_t start = blockIdx.x;
  if (start > 0 && sorted_tokens[start] == sorted_tokens[start - 1]) return;
  const int32_t token = sorted_tokens[start];
  const int64_t local = static_cast<int64_t>(token) - vocab_start;
  if (local < 0 || local >= local_vocab) return;
  for (int64_t j = threadIdx.x; j < h; j += blockDim.x) {
    float total = 0.0f;
    for (int64_t i = start; i < n && sorted_tokens[i] == token; ++i) total += to_float(dout[sorted_rows[i] * h + j]);
    dtable[local * h + j] += total;
  }
}

}  // namespace

void embedding_forward(Context& ctx, const Tensor& out, const Tensor& tokens, const Tensor& table, int64_t vocab_start) {
  const int64_t rows = tokens.numel(), h = table.cols();
  GPT_CHECK(out.rows() == rows && out.cols() == h) << "embedding output";
  dispatch_float_type(table.dtype(), [&](auto tag) {
    using T = decltype(tag);
    embedding_forward_kernel<T><<<grid_for(rows * h, kThreads), kThreads, 0, stream_of(ctx)>>>(
        device_data<T>(out), tokens.data_as<int32_t>(), device_data<T>(table), rows, h, vocab_start, table.rows());
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void embedding_backward(Context& ctx, const Tensor& dtable, const Tensor& dout, const Tensor& tokens,
                        int64_t vocab_start) {
  const int64_t n = tokens.numel(), h = dtable.cols();
  GPT_CHECK(dout.rows() == n && dout.cols() == h) << "embedding backward shapes";
  if (n == 0) return;
  // Scratch: sorted tokens, row indices in and out, then CUB's temporary storage.
  size_t temp_bytes = 0;
  cub::DeviceRadixSort::SortPairs(nullptr, temp_bytes, static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), static_cast<const int32_t*>(nullptr),
                                  static_cast<int32_t*>(nullptr), static_cast<int>(n));
  const size_t ints = static_cast<size_t>(n);
  auto* base = static_cast<char*>(ctx.cuda().scratch(3 * ints * sizeof(int32_t) + temp_bytes + 256, "embedding_backward"));
  auto* sorted_tokens = reinterpret_cast<int32_t*>(base);
  auto* rows_in = sorted_tokens + ints;
  auto* rows_out = rows_in + ints;
  void* temp = base + ((3 * ints * sizeof(int32_t) + 255) / 256) * 256;
  iota_kernel<<<grid_for(n, kThreads), kThreads, 0, stream_of(ctx)>>>(rows_in, n);
  GPT_CUDA_CHECK_LAUNCH();
  GPT_CUDA_CHECK(cub::DeviceRadixSort::SortPairs(temp, temp_bytes, tokens.data_as<int32_t>(), sorted_tokens, rows_in,
                                                 rows_out, static_cast<int>(n), 0, 32, stream_of(ctx)));
  dispatch_float_type(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    token_backward_kernel<T><<<static_cast<unsigned int>(n), kThreads, 0, stream_of(ctx)>>>(
        dtable.data_as<float>(), device_data<T>(dout), sorted_tokens, rows_out, n, h, vocab_start, dtable.rows());
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void position_embedding_forward(Context& ctx, const Tensor& out, const Tensor& table, int64_t batch,
                                int64_t position_offset) {
  const int64_t rows = out.rows(), h = out.cols();
  GPT_CHECK(table.cols() == h && rows % batch == 0 && position_offset + rows / batch <= table.rows())
      << "position embedding shapes";
  dispatch_float_type(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    position_forward_kernel<T><<<grid_for(rows * h, kThreads), kThreads, 0, stream_of(ctx)>>>(
        device_data<T>(out), device_data<T>(table), rows, h, batch, position_offset);
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void position_embedding_backward(Context& ctx, const Tensor& dtable, const Tensor& dout, int64_t batch,
                                 int64_t position_offset) {
  const int64_t rows = dout.rows(), h = dout.cols();
  GPT_CHECK(dtable.cols() == h && rows % batch == 0 && position_offset + rows / batch <= dtable.rows())
      << "position embedding backward shapes";
  dispatch_float_type(dout.dtype(), [&](auto tag) {
    using T = decltype(tag);
    position_backward_kernel<T><<<grid_for(rows / batch * h, kThreads), kThreads, 0, stream_of(ctx)>>>(
        dtable.data_as<float>(), device_data<T>(dout), rows / batch, h, batch, position_offset);
  });
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt::cuda_ops
