// Mixture-of-experts token permutation (kernels/op_list.inc's contracts): the gather into the
// expert-major buffer, the weighted gather back (combine) and the combine weights' gradient. Rows
// are gathered, never scattered, so no two threads write one element and there are no atomics: a
// thread owns kWidth consecutive columns of one output row (16-byte accesses when the row length
// is a multiple of the vector width and every operand is aligned), sums in FP32 in the contract's
// order j = 0..k-1; the weight gradient is one warp per (token, pick) with a fixed-order warp sum.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kThreads = 256;

template <typename T>
struct PermuteArgs {
  T* out;                  // [M, h]
  const T* x;              // [T, h]
  const int32_t* source;   // [M]: the token of each row, < 0 for padding
  const float* row_scale;  // [M] or null
  int64_t rows, h;
};

// out[i] = x[source[i]] (* row_scale[i]), zeros where source[i] < 0.
template <typename T, int kWidth>
__global__ void __launch_bounds__(kThreads) permute_kernel(PermuteArgs<T> a) {
  const int64_t packs_per_row = a.h / kWidth, packs = a.rows * packs_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < packs; p += stride) {
    const int64_t i = p / packs_per_row, c = (p - i * packs_per_row) * kWidth;
    const int32_t s = a.source[i];
    float v[kWidth];
    if (s < 0) {
#pragma unroll
      for (int w = 0; w < kWidth; ++w) v[w] = 0.0f;
    } else {
      load_floats<kWidth>(a.x + s * a.h + c, v);
      const float scale = a.row_scale ? a.row_scale[i] : 1.0f;
#pragma unroll
      for (int w = 0; w < kWidth; ++w) v[w] *= scale;
    }
    store_floats<kWidth>(a.out + i * a.h + c, v);
  }
}

template <typename T>
struct CombineArgs {
  T* y;                         // [T, h]
  const T* rows;                // [M, h]
  const int32_t* destination;  // [T, k]: < 0 for a dropped pair
  const float* weights;         // [T, k] or null
  int64_t tokens, h, k;
};

// y[t] = sum_j weights[t, j] rows[destination[t, j]], FP32 in the order j = 0..k-1.
template <typename T, int kWidth>
__global__ void __launch_bounds__(kThreads) combine_kernel(CombineArgs<T> a) {
  const int64_t packs_per_row = a.h / kWidth, packs = a.tokens * packs_per_row;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t p = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; p < packs; p += stride) {
    const int64_t t = p / packs_per_row, c = (p - t * packs_per_row) * kWidth;
    float acc[kWidth];
#pragma unroll
    for (int w = 0; w < kWidth; ++w) acc[w] = 0.0f;
    for (int64_t j = 0; j < a.k; ++j) {
      const int32_t r = a.destination[t * a.k + j];
      if (r < 0) continue;
      const float scale = a.weights ? a.weights[t * a.k + j] : 1.0f;
      float v[kWidth];
      load_floats<kWidth>(a.rows + r * a.h + c, v);
#pragma unroll
      for (int w = 0; w < kWidth; ++w) acc[w] += scale * v[w];
    }
    store_floats<kWidth>(a.y + t * a.h + c, acc);
  }
}

template <typename T>
struct WeightGradArgs {
  float* dweights;  // [T, k]
  const T* dy;      // [T, h]
  const T* rows;    // [M, h]
  const int32_t* destination;
  int64_t tokens, h, k;
};

constexpr int kWarpsPerBlock = kThreads / 32;

// dweights[t, j] = <dy[t], rows[destination[t, j]]>, one warp per (t, j): lanes stride the columns
// kWidth at a time, then a fixed-order warp sum.
template <typename T, int kWidth>
__global__ void __launch_bounds__(kThreads) weight_grad_kernel(WeightGradArgs<T> a) {
  const int lane = threadIdx.x % 32;
  const int64_t pairs = a.tokens * a.k;
  for (int64_t pair = blockIdx.x * static_cast<int64_t>(kWarpsPerBlock) + threadIdx.x / 32; pair < pairs;
       pair += static_cast<int64_t>(gridDim.x) * kWarpsPerBlock) {
    const int64_t t = pair / a.k;
    const int32_t r = a.destination[pair];
    float dot = 0.0f;
    if (r >= 0) {
      for (int64_t c = lane * static_cast<int64_t>(kWidth); c < a.h; c += 32 * kWidth) {
        float g[kWidth], v[kWidth];
        load_floats<kWidth>(a.dy + t * a.h + c, g);
        load_floats<kWidth>(a.rows + r * a.h + c, v);
#pragma unroll
        for (int w = 0; w < kWidth; ++w) dot += g[w] * v[w];
      }
    }
    dot = warp_sum(dot);
    if (lane == 0) a.dweights[pair] = dot;
  }
}

const float* optional_floats(const Tensor& t) { return t.defined() ? t.data_as<float>() : nullptr; }

}  // namespace

void moe_permute(Context& ctx, const Tensor& out, const Tensor& x, const Tensor& source, const Tensor& row_scale) {
  const int64_t m = out.rows(), h = x.cols();
  GPT_CHECK(out.cols() == h && out.dtype() == x.dtype() && source.dtype() == DType::kInt32 && source.numel() == m &&
            (!row_scale.defined() || (row_scale.dtype() == DType::kFloat32 && row_scale.numel() == m)))
      << "MoE permute " << out.to_string() << " from " << x.to_string() << " by " << source.to_string();
  if (m == 0 || h == 0) return;
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int W = kPackSize<T>;
    const PermuteArgs<T> a{device_data<T>(out), device_data<T>(x), source.data_as<int32_t>(), optional_floats(row_scale), m, h};
    if (rows_vectorizable(h, W, {a.out, a.x})) {
      permute_kernel<T, W><<<resident_grid(ctx, m * (h / W), kThreads), kThreads, 0, stream_of(ctx)>>>(a);
    } else {
      permute_kernel<T, 1><<<resident_grid(ctx, m * h, kThreads), kThreads, 0, stream_of(ctx)>>>(a);
    }
    GPT_CUDA_CHECK_LAUNCH();
  });
}

void moe_combine(Context& ctx, const Tensor& y, const Tensor& rows, const Tensor& destination, const Tensor& weights) {
  const int64_t tokens = y.rows(), h = y.cols(), k = destination.cols();
  GPT_CHECK(rows.cols() == h && rows.dtype() == y.dtype() && destination.dtype() == DType::kInt32 &&
            destination.rows() == tokens &&
            (!weights.defined() || (weights.dtype() == DType::kFloat32 && weights.rows() == tokens && weights.cols() == k)))
      << "MoE combine " << y.to_string() << " from " << rows.to_string() << " by " << destination.to_string();
  if (tokens == 0 || h == 0) return;
  dispatch_float_type(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int W = kPackSize<T>;
    const CombineArgs<T> a{device_data<T>(y), device_data<T>(rows), destination.data_as<int32_t>(), optional_floats(weights),
                           tokens, h, k};
    if (rows_vectorizable(h, W, {a.y, a.rows})) {
      combine_kernel<T, W><<<resident_grid(ctx, tokens * (h / W), kThreads), kThreads, 0, stream_of(ctx)>>>(a);
    } else {
      combine_kernel<T, 1><<<resident_grid(ctx, tokens * h, kThreads), kThreads, 0, stream_of(ctx)>>>(a);
    }
    GPT_CUDA_CHECK_LAUNCH();
  });
}

void moe_combine_weight_grad(Context& ctx, const Tensor& dweights, const Tensor& dy, const Tensor& rows,
                             const Tensor& destination) {
  const int64_t tokens = dy.rows(), h = dy.cols(), k = destination.cols();
  GPT_CHECK(dweights.dtype() == DType::kFloat32 && dweights.rows() == tokens && dweights.cols() == k &&
            rows.cols() == h && rows.dtype() == dy.dtype() && destination.dtype() == DType::kInt32 &&
            destination.rows() == tokens)
      << "MoE combine weight gradient " << dweights.to_string() << " from " << dy.to_string() << " by "
      << destination.to_string();
  if (tokens == 0 || k == 0) return;
  dispatch_float_type(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    constexpr int W = kPackSize<T>;
    const WeightGradArgs<T> a{dweights.data_as<float>(), device_data<T>(dy), device_data<T>(rows),
                              destination.data_as<int32_t>(), tokens, h, k};
    const unsigned int blocks = resident_grid(ctx, tokens * k * 32, kThreads);
    if (rows_vectorizable(h, W, {a.dy, a.rows})) {
      weight_grad_kernel<T, W><<<blocks, kThreads, 0, stream_of(ctx)>>>(a);
    } else {
      weight_grad_kernel<T, 1><<<blocks, kThreads, 0, stream_of(ctx)>>>(a);
    }
    GPT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace gpt::cuda_ops
