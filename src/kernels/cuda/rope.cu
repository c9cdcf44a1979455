// Rotary position embedding (Megatron's RoPE, non-interleaved or --rotary-interleaved) in place on the query and key heads
// of qkv [s, b, groups, (q + 2) d], and its backward (the rotation by -angle). The inverse
// frequencies are computed on the host by the function cpu/rope.cc calls (kernels/rope_frequencies.h:
// FP32, Llama 3.1's scaling included) and passed in the launch; each angle is the FP32 product t * inv_freq_j on both backends, its cosine and sine are
// sincosf (the accurate one, not __sincosf). A thread owns kWidth consecutive pairs (x1_j, x2_j)
// of one head: 16-byte accesses when the half rotary width and the head width are multiples of the
// vector width and qkv is aligned (not interleaved), one pair at a time otherwise. Grid-stride.
#include <algorithm>
#include <cmath>
#include <vector>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kThreads = 256;
constexpr int kMaxRotaryHalf = 256;  // rotary_dim <= 512

template <typename T>
struct RopeArgs {
  T* qkv;
  int64_t rows;               // s * b * groups
  int64_t rows_per_position;  // b * groups
  int64_t width;              // (q + 2) d
  int64_t head_dim, half;
  int64_t rotated_heads;      // q + 1: the queries and the key of a group
  float sign;                 // +1 forward, -1 backward
  int64_t position_offset;    // global position of row 0 (context parallelism's chunks)
  int64_t pair_step, second;  // pair j: (j, half + j) with (1, half); (2j, 2j + 1) interleaved with (2, 1)
  float inv_freq[kMaxRotaryHalf];
};

template <typename T, int kWidth>
__global__ void __launch_bounds__(kThreads) rope_kernel(const __grid_constant__ RopeArgs<T> a) {
  __shared__ float inv_freq[kMaxRotaryHalf];
  for (int j = threadIdx.x; j < a.half; j += blockDim.x) inv_freq[j] = a.inv_freq[j];
  __syncthreads();
  const int64_t groups_per_head = a.half / kWidth;
  const int64_t items = a.rows * a.rotated_heads * groups_per_head;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t item = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; item < items; item += stride) {
    const int64_t head_index = item / groups_per_head;  // row * rotated_heads + head
    const int j0 = static_cast<int>(item - head_index * groups_per_head) * kWidth;
    const int64_t row = head_index / a.rotated_heads;
    const int64_t head = head_index - row * a.rotated_heads;
    const float t = static_cast<float>(a.position_offset + row / a.rows_per_position);
    T* x = a.qkv + row * a.width + head * a.head_dim;
    float x1[kWidth], x2[kWidth];
    // kWidth > 1 only without interleaving (pair_step 1): consecutive pairs, contiguous halves.
    T* first = x + j0 * a.pair_step;
    T* second = x + a.second + j0 * a.pair_step;
    load_floats<kWidth>(first, x1);
    load_floats<kWidth>(second, x2);
#pragma unroll
    for (int k = 0; k < kWidth; ++k) {
      float sine, cosine;
      sincosf(__fmul_rn(t, inv_freq[j0 + k]), &sine, &cosine);
      sine *= a.sign;
      // Separately rounded products, as the CPU reference (no FMA contraction).
      const float y1 = __fmul_rn(x1[k], cosine) - __fmul_rn(x2[k], sine);
      const float y2 = __fmul_rn(x2[k], cosine) + __fmul_rn(x1[k], sine);
      x1[k] = y1;
      x2[k] = y2;
    }
    store_floats<kWidth>(first, x1);
    store_floats<kWidth>(second, x2);
  }
}

template <typename T>
void launch_rope(Context& ctx, const Tensor& qkv, int64_t head_dim, int64_t rotary_dim,
                 const RopeFrequencies& frequencies, bool interleaved, float sign, int64_t position_offset) {
  GPT_CHECK(qkv.rank() == 4) << "RoPE expects qkv [s, b, groups, (q + 2) d], got " << qkv.to_string();
  GPT_CHECK(head_dim > 0 && qkv.cols() % head_dim == 0 && qkv.cols() / head_dim >= 3)
      << "RoPE: qkv " << qkv.to_string() << " is not [s, b, groups, (q + 2) " << head_dim << "]";
  GPT_CHECK(rotary_dim > 0 && rotary_dim % 2 == 0 && rotary_dim <= head_dim)
      << "RoPE: rotary_dim " << rotary_dim << " must be even and in (0, " << head_dim << "]";
  GPT_CHECK(rotary_dim <= 2 * kMaxRotaryHalf) << "RoPE: rotary_dim " << rotary_dim << " above " << 2 * kMaxRotaryHalf;
  GPT_CHECK(frequencies.base > 0.0f) << "RoPE base " << frequencies.base;
  const int64_t s = qkv.size(0);
  if (qkv.numel() == 0 || s == 0) return;
  RopeArgs<T> a{};
  a.qkv = device_data<T>(qkv);
  a.rows = qkv.rows();
  a.rows_per_position = a.rows / s;
  a.width = qkv.cols();
  a.head_dim = head_dim;
  a.half = rotary_dim / 2;
  a.rotated_heads = a.width / head_dim - 1;
  a.sign = sign;
  a.position_offset = position_offset;
  a.pair_step = interleaved ? 2 : 1;
  a.second = interleaved ? 1 : a.half;
  // inv_freq_j in FP32, the values cpu/rope.cc uses.
  const std::vector<float> inv_freq = rope_inverse_frequencies(frequencies, rotary_dim);
  std::copy(inv_freq.begin(), inv_freq.end(), a.inv_freq);
  constexpr int W = kPackSize<T>;
  if (!interleaved && a.half % W == 0 && rows_vectorizable(head_dim, W, {a.qkv})) {
    const int64_t items = a.rows * a.rotated_heads * (a.half / W);
    rope_kernel<T, W><<<resident_grid(ctx, items, kThreads), kThreads, 0, stream_of(ctx)>>>(a);
  } else {
    const int64_t items = a.rows * a.rotated_heads * a.half;
    rope_kernel<T, 1><<<resident_grid(ctx, items, kThreads), kThreads, 0, stream_of(ctx)>>>(a);
  }
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace

void rope_forward(Context& ctx, const Tensor& qkv, int64_t head_dim, int64_t rotary_dim,
                  const RopeFrequencies& frequencies, int64_t position_offset, bool interleaved) {
  dispatch_float_type(qkv.dtype(), [&](auto tag) {
    launch_rope<decltype(tag)>(ctx, qkv, head_dim, rotary_dim, frequencies, interleaved, 1.0f, position_offset);
  });
}

void rope_backward(Context& ctx, const Tensor& dqkv, int64_t head_dim, int64_t rotary_dim,
                   const RopeFrequencies& frequencies, int64_t position_offset, bool interleaved) {
  dispatch_float_type(dqkv.dtype(), [&](auto tag) {
    launch_rope<decltype(tag)>(ctx, dqkv, head_dim, rotary_dim, frequencies, interleaved, -1.0f, position_offset);
  });
}

}  // namespace gpt::cuda_ops
