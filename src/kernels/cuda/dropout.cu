// Hidden dropout on [s_l, b, h] activations (optionally after a bias add) and its backward. The
// mask is regenerated from each element's global coordinates with kernels/dropout_mask.h's
// dropout_keeps, so it is the CPU reference's bit for bit. Vector path (h a multiple of the 16-byte
// width, aligned operands): a thread owns kWidth consecutive channels of a row, whose positions
// start at a multiple of 4, so each Philox block it generates serves four elements; otherwise one
// element per thread (one block per element). Grid-stride.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kThreads = 256;

template <typename T>
struct DropoutArgs {
  T* out;
  const T* in;
  const T* bias;  // [h] or null
  int64_t n, b, h;
  uint64_t key, threshold;
  int64_t sample_offset, row_offset;
  float scale;  // 1 / (1 - p)
  bool enabled;
};

// out[e] = keep ? (in[e] (+ bias[c])) * scale : 0 for the kWidth elements from e, in one row.
template <typename T, int kWidth>
__global__ void __launch_bounds__(kThreads) dropout_kernel(DropoutArgs<T> a) {
  static_assert(kWidth == 1 || kWidth % 4 == 0, "a vector group covers whole Philox blocks");
  const int64_t groups = a.n / kWidth;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups; g += stride) {
    const int64_t e = g * kWidth;
    const int64_t row = e / a.h;
    const int64_t c = e - row * a.h;
    float v[kWidth];
    load_floats<kWidth>(a.in + e, v);
    if (a.bias) {
      float bias[kWidth];
      load_floats<kWidth>(a.bias + c, bias);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) v[k] += bias[k];
    }
    if (a.enabled) {
      const int64_t t = row / a.b;
      const uint64_t sample = static_cast<uint64_t>(a.sample_offset + (row - t * a.b));
      const uint64_t position = static_cast<uint64_t>((a.row_offset + t) * a.h + c);
      if constexpr (kWidth == 1) {
        v[0] = ops::dropout_keeps(a.key, sample, position, a.threshold) ? v[0] * a.scale : 0.0f;
      } else {
        // position % 4 == 0 (h and c are multiples of kWidth): whole Philox blocks, their words in
        // order, which is dropout_keeps(key, sample, position + k, threshold) for each k.
#pragma unroll
        for (int q = 0; q < kWidth / 4; ++q) {
          const PhiloxBlock block = philox4x32_10(a.key, sample, position / 4 + q);
#pragma unroll
          for (int k = 0; k < 4; ++k) {
            v[4 * q + k] = static_cast<uint64_t>(block[k]) >= a.threshold ? v[4 * q + k] * a.scale : 0.0f;
          }
        }
      }
    }
    store_floats<kWidth>(a.out + e, v);
  }
}

template <typename T>
void launch_dropout(Context& ctx, const DropoutArgs<T>& a) {
  if (a.n == 0) return;
  constexpr int W = kPackSize<T>;
  if (rows_vectorizable(a.h, W, {a.out, a.in, a.bias})) {
    dropout_kernel<T, W><<<resident_grid(ctx, a.n / W, kThreads), kThreads, 0, stream_of(ctx)>>>(a);
  } else {
    dropout_kernel<T, 1><<<resident_grid(ctx, a.n, kThreads), kThreads, 0, stream_of(ctx)>>>(a);
  }
  GPT_CUDA_CHECK_LAUNCH();
}

// The [s_l, b, h] extents of a dropout operand, checked against the mask (as cpu/dropout.cc).
struct DropoutShape {
  int64_t s, b, h;
};
DropoutShape dropout_shape(const Tensor& x, const ops::DropoutMask& mask, const char* op) {
  GPT_CHECK(mask.probability >= 0.0f && mask.probability < 1.0f) << op << ": drop probability " << mask.probability;
  if (!mask.enabled()) return {1, x.rows(), x.cols()};
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
  GPT_CHECK(!bias.defined() || bias.numel() == shape.h) << "dropout_forward bias " << bias.to_string();
  if (!mask.enabled() && !bias.defined()) {
    if (out.data() != x.data()) copy(ctx, out, x);
    return;
  }
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_dropout<T>(ctx, {device_data<T>(out), device_data<T>(x), optional_device_data<T>(bias), x.numel(), shape.b,
                            shape.h, mask.key, ops::dropout_threshold(mask.probability), mask.sample_offset,
                            mask.row_offset, 1.0f / (1.0f - mask.probability), mask.enabled()});
  });
}

void dropout_backward(Context& ctx, const Tensor& dx, const Tensor& dy, const ops::DropoutMask& mask) {
  const DropoutShape shape = dropout_shape(dy, mask, "dropout_backward");
  GPT_CHECK(dx.numel() == dy.numel() && dx.dtype() == dy.dtype()) << "dropout_backward " << dx.to_string() << " vs "
                                                                   << dy.to_string();
  if (!mask.enabled()) {
    if (dx.data() != dy.data()) copy(ctx, dx, dy);
    return;
  }
  dispatch_float_type(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_dropout<T>(ctx, {device_data<T>(dx), device_data<T>(dy), nullptr, dy.numel(), shape.b, shape.h, mask.key,
                            ops::dropout_threshold(mask.probability), mask.sample_offset, mask.row_offset,
                            1.0f / (1.0f - mask.probability), true});
  });
}

}  // namespace gpt::cuda_ops
