// Softmax cross-entropy over a vocabulary shard, in FP32, never forming the probabilities as a
// separate tensor: statistics in one pass, the gradient written over the logits in another.
#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/element.h"

namespace gpt::cpu {
namespace {
void check_shard(const Tensor& logits, int64_t vocab_valid) {
  GPT_CHECK(vocab_valid >= 0 && vocab_valid <= logits.cols())
      << "vocab_valid " << vocab_valid << " for logits " << logits.to_string();
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
  dispatch_float_type(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* z = logits.data_as<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const T* row = z + r * cols;
      float maximum = -std::numeric_limits<float>::infinity();
      for (int64_t j = 0; j < vocab_valid; ++j) maximum = std::max(maximum, load(row, j));
      double total = 0.0;
      for (int64_t j = 0; j < vocab_valid; ++j) total += std::exp(load(row, j) - maximum);
      const int64_t local = static_cast<int64_t>(target[r]) - vocab_start;
      row_max.data_as<float>()[r] = maximum;
      row_sumexp.data_as<float>()[r] = static_cast<float>(total);
      target_logit.data_as<float>()[r] = (local >= 0 && local < vocab_valid) ? load(row, local) : 0.0f;
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
  dispatch_float_type(logits.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* z = logits.data_as<T>();
    T* dz = dlogits.data_as<T>();
    for (int64_t r = 0; r < rows; ++r) {
      const float maximum = row_max.data_as<float>()[r];
      const float inverse_sum = 1.0f / row_sumexp.data_as<float>()[r];
      const int64_t local = static_cast<int64_t>(target[r]) - vocab_start;
      for (int64_t j = 0; j < cols; ++j) {
        float gradient = 0.0f;
        if (j < vocab_valid) {
          const float probability = std::exp(load(z, r * cols + j) - maximum) * inverse_sum;
          gradient = (probability - (j == local ? 1.0f : 0.0f)) * grad_scale;
        }
        store(dz, r * cols + j, gradient);
      }
    }
  });
}

}  // namespace gpt::cpu
