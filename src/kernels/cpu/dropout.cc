// Hidden dropout on [s_l, b, h] activations (optionally after a bias add), with the mask of
// kernels/dropout_mask.h regenerated from each element's global coordinates.
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/element.h"

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

}  // namespace

void dropout_forward(Context& ctx, const Tensor& out, const Tensor& x, const Tensor& bias,
                     const ops::DropoutMask& mask) {
  const DropoutShape shape = dropout_shape(x, mask, "dropout_forward");
  GPT_CHECK(out.numel() == x.numel() && out.dtype() == x.dtype()) << "dropout_forward " << out.to_string() << " vs "
                                                                  << x.to_string();
  GPT_CHECK(!bias.defined() || (bias.numel() == shape.h && bias.dtype() == x.dtype()))
      << "dropout_forward bias " << bias.to_string();
  const bool enabled = mask.enabled();
  const uint64_t threshold = ops::dropout_threshold(mask.probability);
  const float scale = 1.0f / (1.0f - mask.probability);
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = x.data_as<T>();
    const T* b = optional_data<T>(bias);
    T* o = out.data_as<T>();
    for (int64_t t = 0; t < shape.s; ++t) {
      for (int64_t i = 0; i < shape.b; ++i) {
        for (int64_t c = 0; c < shape.h; ++c) {
          const int64_t e = (t * shape.b + i) * shape.h + c;
          float v = load(in, e);
          if (b) v += load(b, c);
          if (enabled) {
            const uint64_t position = static_cast<uint64_t>((mask.row_offset + t) * shape.h + c);
            const bool keep = ops::dropout_keeps(mask.key, static_cast<uint64_t>(mask.sample_offset + i), position,
                                                 threshold);
            v = keep ? v * scale : 0.0f;
          }
          store(o, e, v);
        }
      }
    }
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
  const uint64_t threshold = ops::dropout_threshold(mask.probability);
  const float scale = 1.0f / (1.0f - mask.probability);
  dispatch_float_type(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* g = dy.data_as<T>();
    T* o = dx.data_as<T>();
    for (int64_t t = 0; t < shape.s; ++t) {
      for (int64_t i = 0; i < shape.b; ++i) {
        for (int64_t c = 0; c < shape.h; ++c) {
          const int64_t e = (t * shape.b + i) * shape.h + c;
          const uint64_t position = static_cast<uint64_t>((mask.row_offset + t) * shape.h + c);
          const bool keep =
              ops::dropout_keeps(mask.key, static_cast<uint64_t>(mask.sample_offset + i), position, threshold);
          store(o, e, keep ? load(g, e) * scale : 0.0f);
        }
      }
    }
  });
}

}  // namespace gpt::cpu
