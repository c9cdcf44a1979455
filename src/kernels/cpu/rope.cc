// Rotary position embedding (Megatron's RoPE, non-interleaved or --rotary-interleaved), in place on the query and key heads
// of the packed qkv [s, b, groups, (q + 2) d]. The angles are FP32 as in Megatron (inv_freq and
// t * inv_freq rounded to float); their cosine and sine are evaluated in double and rounded.
#include <cmath>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/element.h"

namespace gpt::cpu {
namespace {

// Rotates by +angle (forward) or by -angle (backward: the transposed rotation).
void rotate(const Tensor& qkv, int64_t head_dim, int64_t rotary_dim, const RopeFrequencies& frequencies,
            bool interleaved, bool forward, int64_t position_offset) {
  GPT_CHECK(qkv.rank() == 4) << "RoPE expects qkv [s, b, groups, (q + 2) d], got " << qkv.to_string();
  GPT_CHECK(head_dim > 0 && qkv.cols() % head_dim == 0 && qkv.cols() / head_dim >= 3)
      << "RoPE: qkv " << qkv.to_string() << " is not [s, b, groups, (q + 2) " << head_dim << "]";
  GPT_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= head_dim)
      << "RoPE: rotary_dim " << rotary_dim << " must be even and in (0, " << head_dim << "]";
  GPT_CHECK(frequencies.base > 0.0f) << "RoPE base " << frequencies.base;
  const int64_t s = qkv.size(0), width = qkv.cols(), rotated_heads = width / head_dim - 1;  // q queries + key
  const int64_t rows_per_position = s == 0 ? 0 : qkv.rows() / s;                           // b * groups
  const int64_t half = rotary_dim / 2;
  // Pair j: elements (j, half + j), or (2j, 2j + 1) interleaved.
  const int64_t pair_step = interleaved ? 2 : 1, second = interleaved ? 1 : half;
  // inv_freq_j in FP32, scaled or not (kernels/rope_frequencies.h; cuda/rope.cu reads the same).
  const std::vector<float> inv_freq = rope_inverse_frequencies(frequencies, rotary_dim);
  std::vector<float> cosine(static_cast<size_t>(half)), sine(static_cast<size_t>(half));
  dispatch_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* data = qkv.data_as<T>();
    for (int64_t t = 0; t < s; ++t) {
      for (int64_t j = 0; j < half; ++j) {
        const float angle = static_cast<float>(position_offset + t) * inv_freq[j];
        cosine[j] = static_cast<float>(std::cos(static_cast<double>(angle)));
        sine[j] = static_cast<float>(std::sin(static_cast<double>(angle))) * (forward ? 1.0f : -1.0f);
      }
      for (int64_t row = t * rows_per_position; row < (t + 1) * rows_per_position; ++row) {
        for (int64_t head = 0; head < rotated_heads; ++head) {
          T* x = data + row * width + head * head_dim;
          for (int64_t j = 0; j < half; ++j) {
            const int64_t i1 = j * pair_step, i2 = second + j * pair_step;
            const float x1 = load(x, i1), x2 = load(x, i2);
            store(x, i1, x1 * cosine[j] - x2 * sine[j]);
            store(x, i2, x2 * cosine[j] + x1 * sine[j]);
          }
        }
      }
    }
  });
}

}  // namespace

void rope_forward(Context& ctx, const Tensor& qkv, int64_t head_dim, int64_t rotary_dim,
                  const RopeFrequencies& frequencies, int64_t position_offset, bool interleaved) {
  rotate(qkv, head_dim, rotary_dim, frequencies, interleaved, true, position_offset);
}

void rope_backward(Context& ctx, const Tensor& dqkv, int64_t head_dim, int64_t rotary_dim,
                   const RopeFrequencies& frequencies, int64_t position_offset, bool interleaved) {
  rotate(dqkv, head_dim, rotary_dim, frequencies, interleaved, false, position_offset);
}

}  // namespace gpt::cpu
