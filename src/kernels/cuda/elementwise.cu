// Elementwise ops and the scalar reductions, vectorized (vector_io.cuh): 16-byte accesses on the
// aligned body, a scalar head and tail, grid-stride over any grid. Reductions are deterministic:
// fixed-shape block partials (the grid depends only on the element count) written to scratch, then
// one block adds them in a fixed order.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vector_io.cuh"
#include "kernels/scalar_activations.h"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kThreads = 256;
constexpr float kSqrt2OverPi = 0.7978845608028654f;
constexpr float kGeluCubic = 0.044715f;
constexpr float kInvSqrt2 = 0.70710678118654752440f;    // the exact GeLU's erf(x / sqrt 2)
constexpr float kInvSqrt2Pi = 0.39894228040143267794f;  // the standard normal density's 1 / sqrt(2 pi)

template <int kWidth, typename Op>
__global__ void __launch_bounds__(kThreads) elementwise_kernel(Op op, int64_t n, VectorSplit split) {
  for_each_split<kWidth>(n, split, op);
}

// One thread per aligned group or scalar element; the grid strides when the device is full.
template <int kWidth, typename Op>
void launch_elementwise(Context& ctx, const Op& op, int64_t n, VectorSplit split) {
  if (n == 0) return;
  const int64_t scalars = n - split.groups * kWidth;
  const int64_t work = split.groups > scalars ? split.groups : scalars;
  elementwise_kernel<kWidth><<<resident_grid(ctx, work, kThreads), kThreads, 0, stream_of(ctx)>>>(op, n, split);
  GPT_CUDA_CHECK_LAUNCH();
}

// out = x + delta + bias[column]; bias may be null. Elements of a group may cross a row end.
template <typename T>
struct ResidualAdd {
  T* out;
  const T* x;
  const T* delta;
  const T* bias;  // [h] or null
  int64_t h;
  template <int W>
  __device__ void operator()(Width<W>, int64_t i) const {
    float a[W], d[W];
    load_floats<W>(x + i, a);
    load_floats<W>(delta + i, d);
    int64_t column = bias ? i % h : 0;
#pragma unroll
    for (int k = 0; k < W; ++k) {
      float b = 0.0f;
      if (bias) {
        b = to_float(bias[column]);
        column = column + 1 == h ? 0 : column + 1;
      }
      a[k] = a[k] + d[k] + b;
    }
    store_floats<W>(out + i, a);
  }
};

__device__ __forceinline__ float gelu(float v) {
  return 0.5f * v * (1.0f + tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v)));
}
__device__ __forceinline__ float gelu_derivative(float v) {
  const float t = tanhf(kSqrt2OverPi * (v + kGeluCubic * v * v * v));
  const float d_inner = kSqrt2OverPi * (1.0f + 3.0f * kGeluCubic * v * v);
  return 0.5f * (1.0f + t) + 0.5f * v * (1.0f - t * t) * d_inner;
}

// Activations applied element by element in FP32 (y = f(x), dx = dy f'(x)): the policies of
// ActivationForward / ActivationBackward.
struct TanhGelu {
  static __device__ __forceinline__ float forward(float v) { return gelu(v); }
  static __device__ __forceinline__ float backward(float g, float v) { return g * gelu_derivative(v); }
};

// The exact GeLU, x Phi(x) (PyTorch's F.gelu), and its derivative Phi(x) + x phi(x).
struct ExactGelu {
  static __device__ __forceinline__ float forward(float v) { return 0.5f * v * (1.0f + erff(v * kInvSqrt2)); }
  static __device__ __forceinline__ float backward(float g, float v) {
    return g * (0.5f * (1.0f + erff(v * kInvSqrt2)) + v * kInvSqrt2Pi * expf(-0.5f * v * v));
  }
};

// relu(x)^2, rounded as the CPU reference (no contraction into FMAs).
struct SquaredRelu {
  static __device__ __forceinline__ float forward(float v) {
    const float r = fmaxf(v, 0.0f);
    return __fmul_rn(r, r);
  }
  static __device__ __forceinline__ float backward(float g, float v) {
    return __fmul_rn(g, __fmul_rn(2.0f, fmaxf(v, 0.0f)));
  }
};

template <typename T, typename Activation>
struct ActivationForward {
  T* y;
  const T* x;
  template <int W>
  __device__ void operator()(Width<W>, int64_t i) const {
    float v[W];
    load_floats<W>(x + i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] = Activation::forward(v[k]);
    store_floats<W>(y + i, v);
  }
};

// dx may alias dy (each element is read before it is written, by one thread).
template <typename T, typename Activation>
struct ActivationBackward {
  T* dx;
  const T* dy;
  const T* x;
  template <int W>
  __device__ void operator()(Width<W>, int64_t i) const {
    float v[W], g[W];
    load_floats<W>(x + i, v);
    load_floats<W>(dy + i, g);
#pragma unroll
    for (int k = 0; k < W; ++k) g[k] = Activation::backward(g[k], v[k]);
    store_floats<W>(dx + i, g);
  }
};

template <typename In, typename Out>
struct Cast {
  Out* out;
  const In* in;
  template <int W>
  __device__ void operator()(Width<W>, int64_t i) const {
    float v[W];
    load_floats<W>(in + i, v);
    store_floats<W>(out + i, v);
  }
};

struct Scale {
  float* x;
  float factor;
  template <int W>
  __device__ void operator()(Width<W>, int64_t i) const {
    float v[W];
    load_floats<W>(x + i, v);
#pragma unroll
    for (int k = 0; k < W; ++k) v[k] *= factor;
    store_floats<W>(x + i, v);
  }
};

// ---- Deterministic sums ------------------------------------------------------------------------

constexpr int kReductionThreads = 256;
constexpr int kMaxReductionBlocks = 1024;  // the finishing block adds one partial per thread
constexpr int64_t kGroupsPerReductionThread = 16;

// Blocks for a reduction over n floats: a function of n alone, so the summation order (and the
// result, bit for bit) never depends on the device or on timing.
int reduction_blocks(int64_t n) {
  const int64_t per_block = kReductionThreads * kPackSize<float> * kGroupsPerReductionThread;
  const int64_t blocks = (n + per_block - 1) / per_block;
  return static_cast<int>(blocks < 1 ? 1 : (blocks > kMaxReductionBlocks ? kMaxReductionBlocks : blocks));
}

// Stage 1: each block sums (optionally squared) its grid-stride share into partial[blockIdx.x].
// Four groups are loaded before they are added, to keep several 16-byte loads in flight.
template <bool kSquare>
__global__ void __launch_bounds__(kReductionThreads) partial_sum_kernel(const float* x, int64_t n, VectorSplit split,
                                                                        float* partial) {
  constexpr int W = kPackSize<float>;
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  auto term = [](float v) { return kSquare ? v * v : v; };
  float total = 0.0f;
  int64_t g = first;
  for (; g + 3 * stride < split.groups; g += 4 * stride) {
    float v[4][W];
#pragma unroll
    for (int u = 0; u < 4; ++u) load_floats<W>(x + split.head + (g + u * stride) * W, v[u]);
#pragma unroll
    for (int u = 0; u < 4; ++u) {
#pragma unroll
      for (int k = 0; k < W; ++k) total += term(v[u][k]);
    }
  }
  for (; g < split.groups; g += stride) {
    float v[W];
    load_floats<W>(x + split.head + g * W, v);
#pragma unroll
    for (int k = 0; k < W; ++k) total += term(v[k]);
  }
  for (int64_t i = first; i < split.head; i += stride) total += term(x[i]);
  for (int64_t i = split.head + split.groups * W + first; i < n; i += stride) total += term(x[i]);
  total = block_sum(total);
  if (threadIdx.x == 0) partial[blockIdx.x] = total;
}

// Stage 2: one block adds the partials in a fixed order and accumulates into out[0].
__global__ void finish_sum_kernel(const float* partial, int count, float* out) {
  float total = 0.0f;
  for (int i = threadIdx.x; i < count; i += blockDim.x) total += partial[i];
  total = block_sum(total);
  if (threadIdx.x == 0) out[0] += total;
}

template <bool kSquare>
void reduce_into(Context& ctx, const Tensor& out, const Tensor& x, const char* op) {
  GPT_CHECK(out.numel() == 1 && out.dtype() == DType::kFloat32 && x.dtype() == DType::kFloat32) << op;
  const int64_t n = x.numel();
  const int blocks = reduction_blocks(n);
  const float* data = x.data_as<float>();
  auto* partial = static_cast<float*>(ctx.cuda().scratch(kMaxReductionBlocks * sizeof(float), op));
  partial_sum_kernel<kSquare><<<blocks, kReductionThreads, 0, stream_of(ctx)>>>(
      data, n, split_for_vectors<kPackSize<float>>(n, {operand(data)}), partial);
  GPT_CUDA_CHECK_LAUNCH();
  finish_sum_kernel<<<1, kMaxReductionBlocks, 0, stream_of(ctx)>>>(partial, blocks, out.data_as<float>());
  GPT_CUDA_CHECK_LAUNCH();
}

// out[0] += the number of elements of x that are zero (kZeros) or not finite: per-thread counts,
// summed per block, one atomic per block (an exact integer sum, so the order does not matter).
template <bool kZeros>
__global__ void __launch_bounds__(kReductionThreads) count_kernel(const float* x, int64_t n, unsigned long long* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned int zeros = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const bool counted = kZeros ? x[i] == 0.0f : !isfinite(x[i]);
    zeros += counted ? 1u : 0u;
  }
  __shared__ unsigned long long block_total;
  if (threadIdx.x == 0) block_total = 0;
  __syncthreads();
  atomicAdd(&block_total, static_cast<unsigned long long>(zeros));
  __syncthreads();
  if (threadIdx.x == 0) atomicAdd(out, block_total);
}

// out[0] = max(out[0], max |x|): non-negative floats order as their bit patterns, and a NaN's
// (sign cleared) above every finite value and infinity, so an integer atomicMax per block does.
template <typename T>
__global__ void __launch_bounds__(kReductionThreads) amax_kernel(const T* x, int64_t n, unsigned int* out) {
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  unsigned int largest = 0;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < n; i += stride) {
    const unsigned int bits = __float_as_uint(fabsf(static_cast<float>(x[i])));
    largest = bits > largest ? bits : largest;
  }
  __shared__ unsigned int block_largest;
  if (threadIdx.x == 0) block_largest = 0;
  __syncthreads();
  atomicMax(&block_largest, largest);
  __syncthreads();
  if (threadIdx.x == 0) atomicMax(out, block_largest);
}

}  // namespace

void residual_add(Context& ctx, const Tensor& out, const Tensor& x, const Tensor& delta, const Tensor& delta_bias) {
  GPT_CHECK(out.numel() == x.numel() && delta.numel() == x.numel()) << "residual_add shapes";
  const int64_t h = x.cols();
  GPT_CHECK(!delta_bias.defined() || delta_bias.numel() == h) << "residual_add bias " << delta_bias.to_string();
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int W = kPackSize<T>;
    const ResidualAdd<T> op{device_data<T>(out), device_data<T>(x), device_data<T>(delta),
                            optional_device_data<T>(delta_bias), h};
    launch_elementwise<W>(ctx, op, x.numel(),
                          split_for_vectors<W>(x.numel(), {operand(op.out), operand(op.x), operand(op.delta)}));
  });
}

namespace {

template <typename Activation>
void activation_forward(Context& ctx, const Tensor& y, const Tensor& x, const char* name) {
  GPT_CHECK(y.numel() == x.numel()) << name << " shapes";
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int W = kPackSize<T>;
    const ActivationForward<T, Activation> op{device_data<T>(y), device_data<T>(x)};
    launch_elementwise<W>(ctx, op, x.numel(), split_for_vectors<W>(x.numel(), {operand(op.y), operand(op.x)}));
  });
}

template <typename Activation>
void activation_backward(Context& ctx, const Tensor& dx, const Tensor& dy, const Tensor& x, const char* name) {
  GPT_CHECK(dx.numel() == x.numel() && dy.numel() == x.numel()) << name << " backward shapes";
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int W = kPackSize<T>;
    const ActivationBackward<T, Activation> op{device_data<T>(dx), device_data<T>(dy), device_data<T>(x)};
    launch_elementwise<W>(ctx, op, x.numel(),
                          split_for_vectors<W>(x.numel(), {operand(op.dx), operand(op.dy), operand(op.x)}));
  });
}

}  // namespace

// The tanh GeLU is a scalar activation here too (the CPU backend has vectorized paths for it).
GPT_DEFINE_SCALAR_ACTIVATION(gelu, TanhGelu)
GPT_SCALAR_ACTIVATIONS(GPT_DEFINE_SCALAR_ACTIVATION)

void cast(Context& ctx, const Tensor& out, const Tensor& in) {
  GPT_CHECK_EQ(out.numel(), in.numel()) << "cast sizes";
  dispatch_float_type(in.dtype(), [&](auto in_tag) {
    using In = decltype(in_tag);
    dispatch_float_type(out.dtype(), [&](auto out_tag) {
      using Out = decltype(out_tag);
      // 8 elements per group when either side is bf16 (one 16-byte bf16 access, two float ones).
      constexpr int W = (kPackSize<In> > kPackSize<Out>) ? kPackSize<In> : kPackSize<Out>;
      const Cast<In, Out> op{device_data<Out>(out), device_data<In>(in)};
      launch_elementwise<W>(ctx, op, in.numel(), split_for_vectors<W>(in.numel(), {operand(op.out), operand(op.in)}));
    });
  });
}

void zero(Context& ctx, const Tensor& x) {
  if (x.numel() > 0) GPT_CUDA_CHECK(cudaMemsetAsync(x.data(), 0, x.bytes(), stream_of(ctx)));
}

void poison(Context& ctx, const Tensor& x) {
  if (x.numel() > 0) GPT_CUDA_CHECK(cudaMemsetAsync(x.data(), 0xFF, x.bytes(), stream_of(ctx)));
}

void copy(Context& ctx, const Tensor& out, const Tensor& in) {
  GPT_CHECK(out.dtype() == in.dtype() && out.numel() == in.numel()) << "copy " << in.to_string() << " to " << out.to_string();
  if (in.numel() > 0) {
    GPT_CUDA_CHECK(cudaMemcpyAsync(out.data(), in.data(), in.bytes(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
  }
}

void scale(Context& ctx, const Tensor& x, float factor) {
  constexpr int W = kPackSize<float>;
  const Scale op{x.data_as<float>(), factor};
  launch_elementwise<W>(ctx, op, x.numel(), split_for_vectors<W>(x.numel(), {operand(op.x)}));
}

void sum_of_squares(Context& ctx, const Tensor& out, const Tensor& x) { reduce_into<true>(ctx, out, x, "sum_of_squares"); }
void sum(Context& ctx, const Tensor& out, const Tensor& x) { reduce_into<false>(ctx, out, x, "sum"); }

void amax(Context& ctx, const Tensor& out, const Tensor& x) {
  GPT_CHECK(out.numel() == 1 && out.dtype() == DType::kFloat32) << "amax";
  const int64_t n = x.numel();
  if (n == 0) return;
  auto* result = reinterpret_cast<unsigned int*>(out.data_as<float>());
  if (x.dtype() == DType::kFloat32) {
    amax_kernel<<<reduction_blocks(n), kReductionThreads, 0, stream_of(ctx)>>>(x.data_as<float>(), n, result);
  } else {
    GPT_CHECK(x.dtype() == DType::kBFloat16) << "amax: " << dtype_name(x.dtype());
    amax_kernel<<<reduction_blocks(n), kReductionThreads, 0, stream_of(ctx)>>>(reinterpret_cast<const __nv_bfloat16*>(x.data_as<bf16>()), n, result);
  }
  GPT_CUDA_CHECK_LAUNCH();
}

void count_zeros(Context& ctx, const Tensor& out, const Tensor& x) {
  GPT_CHECK(out.numel() == 1 && out.dtype() == DType::kInt64 && x.dtype() == DType::kFloat32) << "count_zeros";
  const int64_t n = x.numel();
  if (n == 0) return;
  count_kernel<true><<<reduction_blocks(n), kReductionThreads, 0, stream_of(ctx)>>>(
      x.data_as<float>(), n, reinterpret_cast<unsigned long long*>(out.data_as<int64_t>()));
  GPT_CUDA_CHECK_LAUNCH();
}

void count_non_finite(Context& ctx, const Tensor& out, const Tensor& x) {
  GPT_CHECK(out.numel() == 1 && out.dtype() == DType::kInt64 && x.dtype() == DType::kFloat32) << "count_non_finite";
  const int64_t n = x.numel();
  if (n == 0) return;
  count_kernel<false><<<reduction_blocks(n), kReductionThreads, 0, stream_of(ctx)>>>(
      x.data_as<float>(), n, reinterpret_cast<unsigned long long*>(out.data_as<int64_t>()));
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt::cuda_ops
