// SwiGLU forward and backward: x [rows, 2f] = [gate | up]. A thread owns kWidth consecutive
// columns of a row: 16-byte accesses to the gate, the up half and y when f is a multiple of the
// vector width and every operand is aligned, one element at a time otherwise; grid-stride.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kThreads = 256;

// The formulas of cpu/swiglu.cc: silu(g) = g / (1 + exp(-g)), silu'(g) = s (1 + g (1 - s)).
__device__ __forceinline__ float silu(float g) { return g / (1.0f + expf(-g)); }
__device__ __forceinline__ float silu_derivative(float g) {
  const float sigmoid = 1.0f / (1.0f + expf(-g));
  return sigmoid * (1.0f + g * (1.0f - sigmoid));
}

template <typename T>
struct SwiGluArgs {
  T* out;          // forward: y [rows, f]; backward: dx [rows, 2f]
  const T* x;      // [rows, 2f]
  const T* dy;     // backward: [rows, f]
  int64_t rows, f;
};

// Columns [c, c + kWidth) of every row, for all rows * f / kWidth groups (f % kWidth == 0).
template <typename T, int kWidth, bool kBackward>
__global__ void __launch_bounds__(kThreads) swiglu_kernel(SwiGluArgs<T> a) {
  const int64_t groups_per_row = a.f / kWidth;
  const int64_t groups = a.rows * groups_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; g < groups; g += stride) {
    const int64_t row = g / groups_per_row;
    const int64_t c = (g - row * groups_per_row) * kWidth;
    const T* gate_in = a.x + row * 2 * a.f + c;
    const T* up_in = gate_in + a.f;
    float gate[kWidth], up[kWidth];
    load_floats<kWidth>(gate_in, gate);
    load_floats<kWidth>(up_in, up);
    if constexpr (!kBackward) {
      float y[kWidth];
#pragma unroll
      for (int k = 0; k < kWidth; ++k) y[k] = silu(gate[k]) * up[k];
      store_floats<kWidth>(a.out + row * a.f + c, y);
    } else {
      // Both halves are read before either gradient is written: dx may alias x.
      float d[kWidth], dgate[kWidth], dup[kWidth];
      load_floats<kWidth>(a.dy + row * a.f + c, d);
#pragma unroll
      for (int k = 0; k < kWidth; ++k) {
        dgate[k] = d[k] * up[k] * silu_derivative(gate[k]);
        dup[k] = d[k] * silu(gate[k]);
      }
      store_floats<kWidth>(a.out + row * 2 * a.f + c, dgate);
      store_floats<kWidth>(a.out + row * 2 * a.f + a.f + c, dup);
    }
  }
}

template <typename T, bool kBackward>
void launch_swiglu(Context& ctx, const SwiGluArgs<T>& a) {
  if (a.rows == 0 || a.f == 0) return;
  constexpr int W = kPackSize<T>;
  // Vector path: every row of every operand starts 16-byte aligned (f a multiple of the width).
  if (rows_vectorizable(a.f, W, {a.out, a.x, a.dy})) {
    swiglu_kernel<T, W, kBackward><<<resident_grid(ctx, a.rows * (a.f / W), kThreads), kThreads, 0, stream_of(ctx)>>>(a);
  } else {
    swiglu_kernel<T, 1, kBackward><<<resident_grid(ctx, a.rows * a.f, kThreads), kThreads, 0, stream_of(ctx)>>>(a);
  }
  GPT_CUDA_CHECK_LAUNCH();
}

void check_swiglu_shapes(const Tensor& half, const Tensor& x, const char* what) {
  GPT_CHECK(x.cols() % 2 == 0) << "SwiGLU input " << x.to_string() << ": the last dim is [gate | up]";
  GPT_CHECK(half.numel() * 2 == x.numel() && half.cols() * 2 == x.cols())
      << "SwiGLU " << what << " " << half.to_string() << " for input " << x.to_string();
}

}  // namespace

void swiglu_forward(Context& ctx, const Tensor& y, const Tensor& x) {
  check_swiglu_shapes(y, x, "output");
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_swiglu<T, false>(ctx, {device_data<T>(y), device_data<T>(x), nullptr, x.rows(), x.cols() / 2});
  });
}

void swiglu_backward(Context& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x) {
  check_swiglu_shapes(dy, x, "output gradient");
  GPT_CHECK_EQ(dx.numel(), x.numel()) << "SwiGLU input gradient " << dx.to_string();
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    launch_swiglu<T, true>(ctx, {device_data<T>(dx), device_data<T>(x), device_data<T>(dy), x.rows(), x.cols() / 2});
  });
}

}  // namespace gpt::cuda_ops
