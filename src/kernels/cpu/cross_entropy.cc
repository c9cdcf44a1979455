// Softmax cross-entropy over a vocabulary shard, in FP32, never forming the probabilities as a
// separate tensor: statistics in one pass over the logits (online maximum per L1-sized block),
// the gradient written over the logits in another. Vectorized (simd::exp on 16-lane vectors: one
// AVX-512 register where the CPU has it, the exp being what bounds these loops) and split by rows
// over the context's threads; each row's result is independent of the split and of the clone.
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/element.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace gpt::cpu {
namespace {
using simd::f32x16;
constexpr int64_t kLanes = simd::kWideLanes;

void check_shard(const Tensor& logits, int64_t vocab_valid) {
  GPT_CHECK(vocab_valid >= 0 && vocab_valid <= logits.cols())
      << "vocab_valid " << vocab_valid << " for logits " << logits.to_string();
}

// Rows whose work is worth a thread: about 64K logits per piece.
int64_t row_grain(int64_t cols) { return std::max<int64_t>(1, (int64_t{1} << 16) / std::max<int64_t>(cols, 1)); }

constexpr int64_t kBlock = 2048;  // logits per block of the online maximum (8 KiB in FP32)

// Row maximum and sum of exp(z - maximum) over z[0, valid): block by block, the block's maximum
// first, then (the block still in L1) its exponentials against the running maximum, rescaling the
// running sum when the maximum grows. Partial sums in FP32 lanes per block, FP64 across blocks.
template <typename T>
GPT_SIMD_INLINE void row_stats(const T* row, int64_t valid, float& row_max, double& row_sum) {
  float maximum = -std::numeric_limits<float>::infinity();
  double total = 0.0;
  for (int64_t start = 0; start < valid; start += kBlock) {
    const int64_t end = std::min(valid, start + kBlock);
    const int64_t vector_end = start + (end - start) / kLanes * kLanes;
    f32x16 m = simd::splat_as<f32x16>(-std::numeric_limits<float>::infinity());
    for (int64_t j = start; j < vector_end; j += kLanes) m = simd::max(m, simd::load16(row + j));
    float block_max = simd::horizontal_max(m);
    for (int64_t j = vector_end; j < end; ++j) block_max = std::max(block_max, load(row, j));
    if (block_max > maximum) {
      total *= std::exp(static_cast<double>(maximum) - block_max);  // 0 * 0 while maximum is -inf
      maximum = block_max;
    }
    const f32x16 shift = simd::splat_as<f32x16>(maximum);
    f32x16 sum = simd::splat_as<f32x16>(0.0f);
    for (int64_t j = start; j < vector_end; j += kLanes) sum += simd::exp(simd::load16(row + j) - shift);
    double block_sum = simd::horizontal_sum(sum);
    for (int64_t j = vector_end; j < end; ++j) block_sum += simd::exp1(load(row, j) - maximum);
    total += block_sum;
  }
  row_max = maximum;
  row_sum = total;
}

template <typename T>
GPT_SIMD_INLINE void stats_rows(const T* z, const int32_t* target, float* row_max, float* row_sumexp,
                                float* target_logit, int64_t cols, int64_t vocab_start, int64_t vocab_valid,
                                int64_t begin, int64_t end) {
  for (int64_t r = begin; r < end; ++r) {
    const T* row = z + r * cols;
    double total = 0.0;
    row_stats(row, vocab_valid, row_max[r], total);
    row_sumexp[r] = static_cast<float>(total);
    const int64_t local = static_cast<int64_t>(target[r]) - vocab_start;
    target_logit[r] = (local >= 0 && local < vocab_valid) ? load(row, local) : 0.0f;
  }
}

// gradient = (softmax - onehot(target)) * grad_scale over the valid columns, 0 over the padding.
template <typename T>
GPT_SIMD_INLINE void backward_rows(T* dz, const T* z, const int32_t* target, const float* row_max,
                                   const float* row_sumexp, float grad_scale, int64_t cols, int64_t vocab_start,
                                   int64_t vocab_valid, int64_t begin, int64_t end) {
  const int64_t vector_end = vocab_valid / kLanes * kLanes;
  for (int64_t r = begin; r < end; ++r) {
    const T* in = z + r * cols;
    T* out = dz + r * cols;
    const float maximum = row_max[r];
    const float inverse_sum = 1.0f / row_sumexp[r];
    const int64_t local = static_cast<int64_t>(target[r]) - vocab_start;
    const bool has_target = local >= 0 && local < vocab_valid;
    const float target_value = has_target ? load(in, local) : 0.0f;  // before an in-place overwrite
    const f32x16 shift = simd::splat_as<f32x16>(maximum), inverse = simd::splat_as<f32x16>(inverse_sum),
                 scale = simd::splat_as<f32x16>(grad_scale);
    for (int64_t j = 0; j < vector_end; j += kLanes) {
      simd::store16(out + j, (simd::exp(simd::load16(in + j) - shift) * inverse) * scale);
    }
    for (int64_t j = vector_end; j < vocab_valid; ++j) {
      store(out, j, (simd::exp1(load(in, j) - maximum) * inverse_sum) * grad_scale);
    }
    for (int64_t j = vocab_valid; j < cols; ++j) store(out, j, 0.0f);
    if (has_target) {
      const float probability = simd::exp1(target_value - maximum) * inverse_sum;
      store(out, local, (probability - 1.0f) * grad_scale);
    }
  }
}

GPT_CPU_WIDE_CLONES void stats_rows_f32(const float* z, const int32_t* target, float* row_max, float* row_sumexp,
                                   float* target_logit, int64_t cols, int64_t vocab_start, int64_t vocab_valid,
                                   int64_t begin, int64_t end) {
  stats_rows(z, target, row_max, row_sumexp, target_logit, cols, vocab_start, vocab_valid, begin, end);
}
GPT_CPU_WIDE_CLONES void stats_rows_bf16(const bf16* z, const int32_t* target, float* row_max, float* row_sumexp,
                                    float* target_logit, int64_t cols, int64_t vocab_start, int64_t vocab_valid,
                                    int64_t begin, int64_t end) {
  stats_rows(z, target, row_max, row_sumexp, target_logit, cols, vocab_start, vocab_valid, begin, end);
}
GPT_CPU_WIDE_CLONES void stats_rows_fp16(const fp16* z, const int32_t* target, float* row_max, float* row_sumexp,
                                         float* target_logit, int64_t cols, int64_t vocab_start, int64_t vocab_valid,
                                         int64_t begin, int64_t end) {
  stats_rows(z, target, row_max, row_sumexp, target_logit, cols, vocab_start, vocab_valid, begin, end);
}
GPT_CPU_WIDE_CLONES void backward_rows_f32(float* dz, const float* z, const int32_t* target, const float* row_max,
                                      const float* row_sumexp, float grad_scale, int64_t cols, int64_t vocab_start,
                                      int64_t vocab_valid, int64_t begin, int64_t end) {
  backward_rows(dz, z, target, row_max, row_sumexp, grad_scale, cols, vocab_start, vocab_valid, begin, end);
}
GPT_CPU_WIDE_CLONES void backward_rows_bf16(bf16* dz, const bf16* z, const int32_t* target, const float* row_max,
                                       const float* row_sumexp, float grad_scale, int64_t cols, int64_t vocab_start,
                                       int64_t vocab_valid, int64_t begin, int64_t end) {
  backward_rows(dz, z, target, row_max, row_sumexp, grad_scale, cols, vocab_start, vocab_valid, begin, end);
}
GPT_CPU_WIDE_CLONES void backward_rows_fp16(fp16* dz, const fp16* z, const int32_t* target, const float* row_max,
                                       const float* row_sumexp, float grad_scale, int64_t cols, int64_t vocab_start,
                                       int64_t vocab_valid, int64_t begin, int64_t end) {
  backward_rows(dz, z, target, row_max, row_sumexp, grad_scale, cols, vocab_start, vocab_valid, begin, end);
}

}  // namespace

void cross_entropy_stats(Context& ctx, const Tensor& row_max, const Tensor& row_sumexp, const Tensor& target_logit,
                         const Tensor& logits, const Tensor& targets, int64_t vocab_start, int64_t vocab_valid) {
  check_shard(logits, vocab_valid);
  const int64_t rows = logits.rows(), cols = logits.cols();
  GPT_CHECK(targets.numel() == rows && row_max.numel() == rows && row_sumexp.numel() == rows &&
            target_logit.numel() == rows)
      << "cross-entropy row counts";
  const int32_t* target = targets.data_as<int32_t>();
  float* maxima = row_max.data_as<float>();
  float* sums = row_sumexp.data_as<float>();
  float* target_logits = target_logit.data_as<float>();
  parallel_for(ctx, rows, row_grain(cols), [&](int64_t begin, int64_t end) {
    if (logits.dtype() == DType::kFloat32) {
      stats_rows_f32(logits.data_as<float>(), target, maxima, sums, target_logits, cols, vocab_start, vocab_valid,
                     begin, end);
    } else if (logits.dtype() == DType::kBFloat16) {
      stats_rows_bf16(logits.data_as<bf16>(), target, maxima, sums, target_logits, cols, vocab_start, vocab_valid,
                      begin, end);
    } else {
      GPT_CHECK(logits.dtype() == DType::kFloat16) << "cross_entropy_stats: " << dtype_name(logits.dtype());
      stats_rows_fp16(logits.data_as<fp16>(), target, maxima, sums, target_logits, cols, vocab_start, vocab_valid,
                      begin, end);
    }
  });
}

void cross_entropy_rescale(Context& ctx, const Tensor& row_sumexp, const Tensor& local_max, const Tensor& global_max) {
  float* sums = row_sumexp.data_as<float>();
  const float* local = local_max.data_as<float>();
  const float* global = global_max.data_as<float>();
  for (int64_t r = 0; r < row_sumexp.numel(); ++r) {
    // A shard with no valid columns has max -inf and sum 0; it contributes nothing.
    sums[r] = sums[r] == 0.0f ? 0.0f : sums[r] * std::exp(local[r] - global[r]);
  }
}

void cross_entropy_loss(Context& ctx, const Tensor& loss, const Tensor& row_max, const Tensor& row_sumexp,
                        const Tensor& target_logit) {
  for (int64_t r = 0; r < loss.numel(); ++r) {
    loss.data_as<float>()[r] = std::log(row_sumexp.data_as<float>()[r]) + row_max.data_as<float>()[r] -
                               target_logit.data_as<float>()[r];
  }
}

void cross_entropy_backward(Context& ctx, const Tensor& dlogits, const Tensor& logits, const Tensor& targets,
                            const Tensor& row_max, const Tensor& row_sumexp, float grad_scale,
                            int64_t vocab_start, int64_t vocab_valid) {
  check_shard(logits, vocab_valid);
  GPT_CHECK(dlogits.numel() == logits.numel() && dlogits.dtype() == logits.dtype()) << "dlogits shape";
  const int64_t rows = logits.rows(), cols = logits.cols();
  const int32_t* target = targets.data_as<int32_t>();
  const float* maxima = row_max.data_as<float>();
  const float* sums = row_sumexp.data_as<float>();
  parallel_for(ctx, rows, row_grain(cols), [&](int64_t begin, int64_t end) {
    if (logits.dtype() == DType::kFloat32) {
      backward_rows_f32(dlogits.data_as<float>(), logits.data_as<float>(), target, maxima, sums, grad_scale, cols,
                        vocab_start, vocab_valid, begin, end);
    } else if (logits.dtype() == DType::kBFloat16) {
      backward_rows_bf16(dlogits.data_as<bf16>(), logits.data_as<bf16>(), target, maxima, sums, grad_scale, cols,
                         vocab_start, vocab_valid, begin, end);
    } else {
      GPT_CHECK(logits.dtype() == DType::kFloat16) << "cross_entropy_backward: " << dtype_name(logits.dtype());
      backward_rows_fp16(dlogits.data_as<fp16>(), logits.data_as<fp16>(), target, maxima, sums, grad_scale, cols,
                         vocab_start, vocab_valid, begin, end);
    }
  });
}

}  // namespace gpt::cpu
