// Hidden dropout on [s_l, b, h] activations (optionally after a bias add), with the mask of
// kernels/dropout_mask.h regenerated from each element's global coordinates: a row's random words
// many Philox blocks at a time (dropout_words), rows split over the context's threads.
#include <algorithm>
#include <limits>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/dropout_words.h"
#include "kernels/cpu/element.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {
namespace {

// The [s_l, b, h] extents of a dropout operand, checked against the mask.
struct DropoutShape {
  int64_t s, b, h;
};
DropoutShape dropout_shape(const Tensor& x, const ops::DropoutMask& mask, const char* op) {
  GPT_CHECK(mask.probability >= 0.0f && mask.probability < 1.0f) << op << ": drop probability " << mask.probability;
  if (!mask.enabled()) return {1, x.rows(), x.cols()};  // any shape: the mask's coordinates are unused
  GPT_CHECK(x.rank() == 3) << op << " expects [s, b, h] activations, got " << x.to_string();
  GPT_CHECK(mask.sample_offset >= 0 && mask.row_offset >= 0) << op << ": negative mask offsets";
  return {x.size(0), x.size(1), x.size(2)};
}

// ops::dropout_keeps's threshold as 32 bits (probability < 1, so it is below 2^32).
uint32_t keep_threshold(const ops::DropoutMask& mask) {
  const uint64_t threshold = ops::dropout_threshold(mask.probability);
  GPT_CHECK(threshold <= std::numeric_limits<uint32_t>::max()) << "dropout threshold " << threshold;
  return static_cast<uint32_t>(threshold);
}

// Rows of h elements worth a thread: about 16K elements per piece.
int64_t row_grain(int64_t h) { return std::max<int64_t>(1, 16384 / std::max<int64_t>(h, 1)); }

}  // namespace

void dropout_forward(Context& ctx, const Tensor& out, const Tensor& x, const Tensor& bias,
                     const ops::DropoutMask& mask) {
  const DropoutShape shape = dropout_shape(x, mask, "dropout_forward");
  GPT_CHECK(out.numel() == x.numel() && out.dtype() == x.dtype()) << "dropout_forward " << out.to_string() << " vs "
                                                                  << x.to_string();
  GPT_CHECK(!bias.defined() || (bias.numel() == shape.h && bias.dtype() == x.dtype()))
      << "dropout_forward bias " << bias.to_string();
  const bool enabled = mask.enabled();
  const uint32_t threshold = keep_threshold(mask);
  const float scale = 1.0f / (1.0f - mask.probability);
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    const T* b = optional_data<T>(bias);
    T* o = out.data_as<T>();
    parallel_for(ctx, shape.s * shape.b, row_grain(shape.h), [&](int64_t begin, int64_t end) {
      uint32_t words[kDropoutChunk];
      for (int64_t row = begin; row < end; ++row) {  // row = t * b + i
        const int64_t t = row / shape.b, i = row % shape.b;
        for (int64_t first = 0; first < shape.h; first += kDropoutChunk) {
          const int64_t count = std::min(kDropoutChunk, shape.h - first);
          const int64_t e0 = row * shape.h + first;
          if (enabled) {
            dropout_words(mask.key, static_cast<uint64_t>(mask.sample_offset + i),
                          static_cast<uint64_t>((mask.row_offset + t) * shape.h + first), count, words);
          }
          for (int64_t c = 0; c < count; ++c) {
            float v = load(in, e0 + c);
            if (b) v += load(b, first + c);
            if (enabled) v = words[c] >= threshold ? v * scale : 0.0f;
            store(o, e0 + c, v);
          }
        }
      }
    });
  });
}

void dropout_backward(Context& ctx, const Tensor& dx, const Tensor& dy, const ops::DropoutMask& mask) {
  const DropoutShape shape = dropout_shape(dy, mask, "dropout_backward");
  GPT_CHECK(dx.numel() == dy.numel() && dx.dtype() == dy.dtype()) << "dropout_backward " << dx.to_string() << " vs "
                                                                   << dy.to_string();
  if (!mask.enabled()) {
    copy(ctx, dx, dy);
    return;
  }
  const uint32_t threshold = keep_threshold(mask);
  const float scale = 1.0f / (1.0f - mask.probability);
  dispatch_float_type(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data_as<T>();
    T* o = dx.data_as<T>();
    parallel_for(ctx, shape.s * shape.b, row_grain(shape.h), [&](int64_t begin, int64_t end) {
      uint32_t words[kDropoutChunk];
      for (int64_t row = begin; row < end; ++row) {
        const int64_t t = row / shape.b, i = row % shape.b;
        for (int64_t first = 0; first < shape.h; first += kDropoutChunk) {
          const int64_t count = std::min(kDropoutChunk, shape.h - first);
          const int64_t e0 = row * shape.h + first;
          dropout_words(mask.key, static_cast<uint64_t>(mask.sample_offset + i),
                        static_cast<uint64_t>((mask.row_offset + t) * shape.h + first), count, words);
          for (int64_t c = 0; c < count; ++c) store(o, e0 + c, words[c] >= threshold ? load(g, e0 + c) * scale : 0.0f);
        }
      }
    });
  });
}

}  // namespace gpt::cpu
