// Softmax cross-entropy over a vocabulary shard, one block per row (grid-stride), FP32 math, the
// probabilities never stored: statistics in one pass over the logits (online max and sum of
// exponentials, 16-byte loads), the gradient written over the logits in another.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kThreads = 512;

// (max, sum) += (other_max, other_sum): sums of exp(z - max) rescaled to the larger maximum. An
// empty side has max -inf and sum 0 and leaves the other unchanged.
__device__ __forceinline__ void combine(float& maximum, float& sum, float other_max, float other_sum) {
  const float larger = fmaxf(maximum, other_max);
  if (larger == -INFINITY) return;
  sum = sum * expf(maximum - larger) + other_sum * expf(other_max - larger);
  maximum = larger;
}

// Combines every thread's (max, sum) over the block in a fixed order; thread 0 gets the result.
__device__ __forceinline__ void block_combine(float& maximum, float& sum) {
  __shared__ float warp_max[32], warp_sum_[32];
  for (int offset = 16; offset > 0; offset >>= 1) {
    const float other_max = __shfl_down_sync(0xffffffffu, maximum, offset);
    const float other_sum = __shfl_down_sync(0xffffffffu, sum, offset);
    combine(maximum, sum, other_max, other_sum);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // the previous row's readers are done
  if (lane == 0) {
    warp_max[warp] = maximum;
    warp_sum_[warp] = sum;
  }
  __syncthreads();
  if (threadIdx.x == 0) {
    maximum = warp_max[0];
    sum = warp_sum_[0];
    for (int w = 1; w < static_cast<int>(blockDim.x / 32); ++w) combine(maximum, sum, warp_max[w], warp_sum_[w]);
  }
}

template <typename T>
struct StatsArgs {
  float* row_max;
  float* row_sumexp;
  float* target_logit;
  const T* logits;
  const int32_t* targets;
  int64_t rows, cols, vocab_start, vocab_valid;
  bool vector;  // cols % W == 0 and 16-byte aligned logits
};

// Online statistics of the W logits at row[col]: columns >= vocab_valid are padding and excluded.
template <int W, typename T>
__device__ __forceinline__ void accumulate_stats(const T* row, int64_t col, int64_t valid, float& maximum,
                                                 float& sum) {
  float z[W];
  load_floats<W>(row + col, z);
  float pack_max = -INFINITY;
#pragma unroll
  for (int k = 0; k < W; ++k) {
    if (col + k < valid) pack_max = fmaxf(pack_max, z[k]);
  }
  if (pack_max == -INFINITY) return;  // all padding (logits are finite)
  if (pack_max > maximum) {
    sum *= expf(maximum - pack_max);  // 0 while maximum is still -inf
    maximum = pack_max;
  }
#pragma unroll
  for (int k = 0; k < W; ++k) {
    if (col + k < valid) sum += expf(z[k] - maximum);
  }
}

template <typename T>
__global__ void __launch_bounds__(kThreads) stats_kernel(StatsArgs<T> a) {
  constexpr int W = kPackSize<T>;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const T* row = a.logits + r * a.cols;
    float maximum = -INFINITY, sum = 0.0f;
    if (a.vector) {
      for (int64_t col = threadIdx.x * static_cast<int64_t>(W); col < a.vocab_valid; col += static_cast<int64_t>(blockDim.x) * W) {
        accumulate_stats<W>(row, col, a.vocab_valid, maximum, sum);
      }
    } else {
      for (int64_t col = threadIdx.x; col < a.vocab_valid; col += blockDim.x) {
        accumulate_stats<1>(row, col, a.vocab_valid, maximum, sum);
      }
    }
    block_combine(maximum, sum);
    if (threadIdx.x == 0) {
      const int64_t local = static_cast<int64_t>(a.targets[r]) - a.vocab_start;
      a.row_max[r] = maximum;
      a.row_sumexp[r] = sum;
      a.target_logit[r] = (local >= 0 && local < a.vocab_valid) ? to_float(row[local]) : 0.0f;
    }
  }
}

__global__ void rescale_kernel(float* sums, const float* local, const float* global, int64_t rows) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    sums[r] = sums[r] == 0.0f ? 0.0f : sums[r] * expf(local[r] - global[r]);
  }
}

__global__ void loss_kernel(float* loss, const float* row_max, const float* sums, const float* target, int64_t rows) {
  for (int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; r < rows;
       r += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    loss[r] = logf(sums[r]) + row_max[r] - target[r];
  }
}

template <typename T>
struct BackwardArgs {
  T* dlogits;
  const T* logits;
  const int32_t* targets;
  const float* row_max;
  const float* row_sumexp;
  float grad_scale;
  int64_t rows, cols, vocab_start, vocab_valid;
  bool vector;  // cols % W == 0 and both matrices 16-byte aligned
};

// dlogits[col, col + W) of one row: (softmax - onehot) * grad_scale on valid columns, 0 on padding.
template <int W, typename T>
__device__ __forceinline__ void gradient_pack(const BackwardArgs<T>& a, int64_t base, int64_t col, float maximum,
                                              float inverse_sum, int64_t local) {
  float g[W];
  load_floats<W>(a.logits + base + col, g);
#pragma unroll
  for (int k = 0; k < W; ++k) {
    float gradient = 0.0f;
    if (col + k < a.vocab_valid) {
      const float probability = expf(g[k] - maximum) * inverse_sum;
      gradient = (probability - (col + k == local ? 1.0f : 0.0f)) * a.grad_scale;
    }
    g[k] = gradient;
  }
  store_floats<W>(a.dlogits + base + col, g);
}

// dlogits may alias logits: every element is read, then written, by the same thread.
template <typename T>
__global__ void __launch_bounds__(kThreads) backward_kernel(BackwardArgs<T> a) {
  constexpr int W = kPackSize<T>;
  for (int64_t r = blockIdx.x; r < a.rows; r += gridDim.x) {
    const int64_t base = r * a.cols;
    const float maximum = a.row_max[r];
    const float inverse_sum = 1.0f / a.row_sumexp[r];
    const int64_t local = static_cast<int64_t>(a.targets[r]) - a.vocab_start;
    if (a.vector) {
      for (int64_t col = threadIdx.x * static_cast<int64_t>(W); col < a.cols; col += static_cast<int64_t>(blockDim.x) * W) {
        gradient_pack<W>(a, base, col, maximum, inverse_sum, local);
      }
    } else {
      for (int64_t col = threadIdx.x; col < a.cols; col += blockDim.x) {
        gradient_pack<1>(a, base, col, maximum, inverse_sum, local);
      }
    }
  }
}

}  // namespace

void cross_entropy_stats(Context& ctx, const Tensor& row_max, const Tensor& row_sumexp, const Tensor& target_logit,
                         const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid) {
  const int64_t rows = logits.rows();
  GPT_CHECK(vocab_valid >= 0 && vocab_valid <= logits.cols() && targets.numel() == rows && row_max.numel() == rows &&
            row_sumexp.numel() == rows && target_logit.numel() == rows)
      << "cross-entropy shapes";
  if (rows == 0) return;
  dispatch_float_type(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    StatsArgs<T> a{row_max.data_as<float>(), row_sumexp.data_as<float>(), target_logit.data_as<float>(),
                   device_data<T>(logits), targets.data_as<int32_t>(), rows, logits.cols(), vocab_start,
                   vocab_valid, false};
    a.vector = rows_vectorizable(a.cols, kPackSize<T>, {a.logits});
    const unsigned int grid = occupancy_grid(ctx, stats_kernel<T>, kThreads, 0, rows);
    stats_kernel<T><<<grid, kThreads, 0, stream_of(ctx)>>>(a);
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void cross_entropy_rescale(Context& ctx, const Tensor& row_sumexp, const Tensor& local_max, const Tensor& global_max) {
  const int64_t rows = row_sumexp.numel();
  GPT_CHECK(local_max.numel() == rows && global_max.numel() == rows) << "cross-entropy rescale shapes";
  if (rows == 0) return;
  rescale_kernel<<<resident_grid(ctx, rows, 256), 256, 0, stream_of(ctx)>>>(
      row_sumexp.data_as<float>(), local_max.data_as<float>(), global_max.data_as<float>(), rows);
  GPT_CUDA_CHECK_LAUNCH();
}

void cross_entropy_loss(Context& ctx, const Tensor& loss, const Tensor& row_max, const Tensor& row_sumexp,
                        const Tensor& target_logit) {
  const int64_t rows = loss.numel();
  GPT_CHECK(row_max.numel() == rows && row_sumexp.numel() == rows && target_logit.numel() == rows)
      << "cross-entropy loss shapes";
  if (rows == 0) return;
  loss_kernel<<<resident_grid(ctx, rows, 256), 256, 0, stream_of(ctx)>>>(
      loss.data_as<float>(), row_max.data_as<float>(), row_sumexp.data_as<float>(), target_logit.data_as<float>(), rows);
  GPT_CUDA_CHECK_LAUNCH();
}

void cross_entropy_backward(Context& ctx, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                            const Tensor& row_max, const Tensor& row_sumexp, float grad_scale, int64_t vocab_start,
                            int64_t vocab_valid) {
  const int64_t rows = logits.rows();
  GPT_CHECK(dlogits.numel() == logits.numel() && dlogits.dtype() == logits.dtype()) << "dlogits shape";
  GPT_CHECK(vocab_valid >= 0 && vocab_valid <= logits.cols() && targets.numel() == rows && row_max.numel() == rows &&
            row_sumexp.numel() == rows)
      << "cross-entropy backward shapes";
  if (rows == 0) return;
  dispatch_float_type(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    BackwardArgs<T> a{device_data<T>(dlogits), device_data<T>(logits), targets.data_as<int32_t>(),
                      row_max.data_as<float>(), row_sumexp.data_as<float>(), grad_scale, rows, logits.cols(),
                      vocab_start, vocab_valid, false};
    a.vector = rows_vectorizable(a.cols, kPackSize<T>, {a.dlogits, a.logits});
    const unsigned int grid = occupancy_grid(ctx, backward_kernel<T>, kThreads, 0, rows);
    backward_kernel<T><<<grid, kThreads, 0, stream_of(ctx)>>>(a);
  });
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt::cuda_ops
