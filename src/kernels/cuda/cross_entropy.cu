// Softmax cross-entropy over a vocabulary shard, one block per row, FP32 math, the probabilities
// never stored: statistics in one kernel, the gradient written over the logits in another.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kThreads = 512;

template <typename T>
__global__ void stats_kernel(float* row_max, float* row_sumexp, float* target_logit, const T* logits,
                             const int32_t* targets, int64_t cols, int64_t vocab_start, int64_t vocab_valid) {
  const T* row = logits + blockIdx.x * cols;
  float maximum = -INFINITY;
  for (int64_t j = threadIdx.x; j < vocab_valid; j += blockDim.x) maximum = fmaxf(maximum, to_float(row[j]));
  maximum = block_max(maximum);
  float total = 0.0f;
  for (int64_t j = threadIdx.x; j < vocab_valid; j += blockDim.x) total += expf(to_float(row[j]) - maximum);
  total = block_sum(total);
  if (threadIdx.x == 0) {
    const int64_t local = static_cast<int64_t>(targets[blockIdx.x]) - vocab_start;
    row_max[blockIdx.x] = maximum;
    row_sumexp[blockIdx.x] = total;
    target_logit[blockIdx.x] = (local >= 0 && local < vocab_valid) ? to_float(row[local]) : 0.0f;
  }
}

__global__ void rescale_kernel(float* sums, const float* local, const float* global, int64_t rows) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r < rows) sums[r] = sums[r] == 0.0f ? 0.0f : sums[r] * expf(local[r] - global[r]);
}

__global__ void loss_kernel(float* loss, const float* row_max, const float* sums, const float* target, int64_t rows) {
  const int64_t r = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  if (r < rows) loss[r] = logf(sums[r]) + row_max[r] - target[r];
}

template <typename T>
__global__ void backward_kernel(T* dlogits, const T* logits, const int32_t* targets, const float* row_max,
                                const float* sums, float grad_scale, int64_t cols, int64_t vocab_start,
                                int64_t vocab_valid) {
  const int64_t base = blockIdx.x * cols;
  const float maximum = row_max[blockIdx.x];
  const float inverse_sum = 1.0f / sums[blockIdx.x];
  const int64_t local = static_cast<int64_t>(targets[blockIdx.x]) - vocab_start;
  for (int64_t j = threadIdx.x; j < cols; j += blockDim.x) {
    float gradient = 0.0f;
    if (j < vocab_valid) {
      const float probability = expf(to_float(logits[base + j]) - maximum) * inverse_sum;
      gradient = (probability - (j == local ? 1.0f : 0.0f)) * grad_scale;
    }
    dlogits[base + j] = from_float<T>(gradient);
  }
}

}  // namespace

void cross_entropy_stats(Context& ctx, const Tensor& row_max, const Tensor& row_sumexp, const Tensor& target_logit,
                         const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid) {
  const int64_t rows = logits.rows();
  GPT_CHECK(vocab_valid >= 0 && vocab_valid <= logits.cols() && targets.numel() == rows && row_max.numel() == rows)
      << "cross-entropy shapes";
  if (rows == 0) return;
  dispatch_float_type(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    stats_kernel<T><<<static_cast<unsigned int>(rows), kThreads, 0, stream_of(ctx)>>>(
        row_max.data_as<float>(), row_sumexp.data_as<float>(), target_logit.data_as<float>(), device_data<T>(logits),
        targets.data_as<int32_t>(), logits.cols(), vocab_start, vocab_valid);
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void cross_entropy_rescale(Context& ctx, const Tensor& row_sumexp, const Tensor& local_max, const Tensor& global_max) {
  const int64_t rows = row_sumexp.numel();
  rescale_kernel<<<grid_for(rows, 256), 256, 0, stream_of(ctx)>>>(row_sumexp.data_as<float>(), local_max.data_as<float>(),
                                                                  global_max.data_as<float>(), rows);
  GPT_CUDA_CHECK_LAUNCH();
}

void cross_entropy_loss(Context& ctx, const Tensor& loss, const Tensor& row_max, const Tensor& row_sumexp,
                        const Tensor& target_logit) {
  const int64_t rows = loss.numel();
  loss_kernel<<<grid_for(rows, 256), 256, 0, stream_of(ctx)>>>(loss.data_as<float>(), row_max.data_as<float>(),
                                                               row_sumexp.data_as<float>(),
                                                               target_logit.data_as<float>(), rows);
  GPT_CUDA_CHECK_LAUNCH();
}

void cross_entropy_backward(Context& ctx, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                            const Tensor& row_max, const Tensor& row_sumexp, float grad_scale, int64_t vocab_start,
                            int64_t vocab_valid) {
  const int64_t rows = logits.rows();
  GPT_CHECK(dlogits.numel() == logits.numel() && dlogits.dtype() == logits.dtype()) << "dlogits shape";
  if (rows == 0) return;
  dispatch_float_type(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    backward_kernel<T><<<static_cast<unsigned int>(rows), kThreads, 0, stream_of(ctx)>>>(
        device_data<T>(dlogits), device_data<T>(logits), targets.data_as<int32_t>(), row_max.data_as<float>(),
        row_sumexp.data_as<float>(), grad_scale, logits.cols(), vocab_start, vocab_valid);
  });
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt::cuda_ops
