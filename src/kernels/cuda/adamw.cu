// AdamW on FP32 master weights, all parameter segments of the flat optimizer state in one launch
// (multi-tensor): the segment table travels in the kernel's parameters (CUDA 12.1+ allows 32 KB),
// each block walks tiles of 4096 elements and finds its segment by binary search in that table.
// Per element: 16-byte loads of master, grad and both moments, 16-byte stores of the three
// updated ones and an 8-byte store of the BF16 copy: 30 bytes per parameter with a copy.
#include <algorithm>
#include <cmath>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kThreads = 256;
constexpr int kWidth = kPackSize<float>;           // 4 elements per group
constexpr int64_t kTile = kThreads * kWidth * 4;    // elements per block iteration
constexpr int kMaxSegmentsPerLaunch = 384;

struct AdamWConstants {
  float beta1, one_minus_beta1, beta2, one_minus_beta2, epsilon;
  float step_size, bias_correction2_sqrt, grad_scale;
};

// Copy: the 16-bit parameter type the updated master is rounded into (__nv_bfloat16 or __half).
template <typename Copy>
struct AdamWPointers {
  float* master;
  const float* grad;
  float* exp_avg;
  float* exp_avg_sq;
  Copy* copy;  // null when the master is the parameter (FP32 training)
};

// Non-empty segments; segment s covers tiles [first_tile[s], first_tile[s + 1]).
struct SegmentTable {
  int count;
  int64_t offset[kMaxSegmentsPerLaunch];
  int64_t length[kMaxSegmentsPerLaunch];
  float decay[kMaxSegmentsPerLaunch];  // 1 - lr * weight_decay
  int64_t first_tile[kMaxSegmentsPerLaunch + 1];
};
static_assert(sizeof(SegmentTable) + sizeof(AdamWConstants) + sizeof(AdamWPointers<__half>) + 8 <= 32764,
              "kernel parameters are limited to 32764 bytes");

// torch.optim.AdamW's arithmetic in the order of the CPU reference (cpu/elementwise.cc), with
// explicitly rounded operations so that no FMA contraction changes a bit.
__device__ __forceinline__ void adamw_element(const AdamWConstants& c, float decay, float& p, float g, float& m,
                                              float& v) {
  const float gi = __fmul_rn(g, c.grad_scale);
  m = __fadd_rn(__fmul_rn(c.beta1, m), __fmul_rn(c.one_minus_beta1, gi));
  v = __fadd_rn(__fmul_rn(c.beta2, v), __fmul_rn(__fmul_rn(c.one_minus_beta2, gi), gi));
  const float denominator = __fadd_rn(__fdiv_rn(__fsqrt_rn(v), c.bias_correction2_sqrt), c.epsilon);
  p = __fsub_rn(__fmul_rn(p, decay), __fdiv_rn(__fmul_rn(c.step_size, m), denominator));
}

// Elements [i, i + W) (W = 4, aligned; or W = 1).
template <int W, typename Copy>
__device__ __forceinline__ void adamw_elements(const AdamWPointers<Copy>& a, const AdamWConstants& c, float decay,
                                               int64_t i) {
  float p[W], g[W], m[W], v[W];
  load_floats<W>(a.master + i, p);
  load_floats<W>(a.grad + i, g);
  load_floats<W>(a.exp_avg + i, m);
  load_floats<W>(a.exp_avg_sq + i, v);
#pragma unroll
  for (int k = 0; k < W; ++k) adamw_element(c, decay, p[k], g[k], m[k], v[k]);
  store_floats<W>(a.master + i, p);
  store_floats<W>(a.exp_avg + i, m);
  store_floats<W>(a.exp_avg_sq + i, v);
  if (a.copy) store_floats<W>(a.copy + i, p);
}

// `phase` >= 0: every pointer is as far from 16-byte (16-bit copy: 8-byte) alignment, so element i
// starts an aligned group of 4 when (i + phase) % 4 == 0; -1: the scalar path everywhere.
template <typename Copy>
__global__ void __launch_bounds__(kThreads) adamw_segments_kernel(AdamWPointers<Copy> a, AdamWConstants c,
                                                                  const SegmentTable table, int phase) {
  const int64_t tiles = table.first_tile[table.count];
  for (int64_t tile = blockIdx.x; tile < tiles; tile += gridDim.x) {
    // The last segment whose first tile is <= tile (uniform across the block).
    int low = 0, high = table.count - 1;
    while (low < high) {
      const int middle = (low + high + 1) / 2;
      if (table.first_tile[middle] <= tile) low = middle;
      else high = middle - 1;
    }
    const int s = low;
    const int64_t segment_end = table.offset[s] + table.length[s];
    const int64_t begin = table.offset[s] + (tile - table.first_tile[s]) * kTile;
    const int64_t end = begin + kTile < segment_end ? begin + kTile : segment_end;
    const float decay = table.decay[s];
    if (phase < 0) {
      for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) adamw_elements<1>(a, c, decay, i);
      continue;
    }
    const int64_t rounded_up = (begin + phase + kWidth - 1) / kWidth * kWidth - phase;
    const int64_t body_begin = rounded_up < end ? rounded_up : end;
    const int64_t rounded_down = (end + phase) / kWidth * kWidth - phase;
    const int64_t body_end = rounded_down > body_begin ? rounded_down : body_begin;
    for (int64_t i = begin + threadIdx.x; i < body_begin; i += blockDim.x) adamw_elements<1>(a, c, decay, i);
    for (int64_t i = body_begin + threadIdx.x * static_cast<int64_t>(kWidth); i < body_end;
         i += static_cast<int64_t>(blockDim.x) * kWidth) {
      adamw_elements<kWidth>(a, c, decay, i);
    }
    for (int64_t i = body_end + threadIdx.x; i < end; i += blockDim.x) adamw_elements<1>(a, c, decay, i);
  }
}

AdamWConstants constants_for(const ops::AdamWStep& step) {
  // Bias corrections in double, as the CPU reference (and torch) compute them.
  const double bias_correction1 = 1.0 - std::pow(static_cast<double>(step.beta1), static_cast<double>(step.step));
  const double bias_correction2 = 1.0 - std::pow(static_cast<double>(step.beta2), static_cast<double>(step.step));
  return {step.beta1,
          1.0f - step.beta1,
          step.beta2,
          1.0f - step.beta2,
          step.epsilon,
          static_cast<float>(step.learning_rate / bias_correction1),
          static_cast<float>(std::sqrt(bias_correction2)),
          step.grad_scale};
}

template <typename Copy>
void launch_segments(Context& ctx, const ops::AdamWStep& step, const AdamWPointers<Copy>& a,
                     std::span<const ops::AdamWSegment> segments) {
  const AdamWConstants c = constants_for(step);
  // Views of the flat state (ZeRO shards, flat_range) may start anywhere: the vector path needs
  // every pointer at the same distance, in elements, from its alignment.
  auto phase_of = [](const void* pointer, int64_t element_bytes) -> int64_t {
    const auto address = reinterpret_cast<uintptr_t>(pointer);
    if (address % element_bytes != 0) return -1;
    return static_cast<int64_t>((address / element_bytes) % kWidth);
  };
  const int64_t phase = phase_of(a.master, sizeof(float));
  bool same = phase >= 0;
  for (const void* p : {static_cast<const void*>(a.grad), static_cast<const void*>(a.exp_avg),
                        static_cast<const void*>(a.exp_avg_sq)}) {
    same = same && phase_of(p, sizeof(float)) == phase;
  }
  if (a.copy != nullptr) same = same && phase_of(a.copy, sizeof(Copy)) == phase;
  const int vector_phase = same ? static_cast<int>(phase) : -1;
  size_t next = 0;
  while (next < segments.size()) {
    // A batch of up to kMaxSegmentsPerLaunch non-empty segments (one launch for any GPT we train).
    SegmentTable table;
    table.count = 0;
    int64_t tiles = 0;
    for (; next < segments.size() && table.count < kMaxSegmentsPerLaunch; ++next) {
      const ops::AdamWSegment& s = segments[next];
      if (s.length == 0) continue;
      table.offset[table.count] = s.offset;
      table.length[table.count] = s.length;
      table.decay[table.count] = 1.0f - step.learning_rate * (s.weight_decay ? step.weight_decay : 0.0f);
      table.first_tile[table.count] = tiles;
      tiles += (s.length + kTile - 1) / kTile;
      ++table.count;
    }
    if (table.count == 0) break;
    table.first_tile[table.count] = tiles;
    const unsigned int grid = occupancy_grid(ctx, adamw_segments_kernel<Copy>, kThreads, 0, tiles);
    adamw_segments_kernel<Copy><<<grid, kThreads, 0, stream_of(ctx)>>>(a, c, table, vector_phase);
    GPT_CUDA_CHECK_LAUNCH();
  }
}

// Launches with the pointers for param_out's type (none: the BF16 instantiation with a null copy).
void launch(Context& ctx, const ops::AdamWStep& step, const Tensor& master, const Tensor& grad, const Tensor& exp_avg,
            const Tensor& exp_avg_sq, const Tensor& param_out, std::span<const ops::AdamWSegment> segments) {
  const int64_t n = master.numel();
  GPT_CHECK(grad.numel() == n && exp_avg.numel() == n && exp_avg_sq.numel() == n) << "adamw sizes";
  GPT_CHECK(!param_out.defined() || (param_out.numel() == n && is_float16_dtype(param_out.dtype()))) << "adamw copy";
  auto with = [&](auto* copy) {
    using Copy = std::remove_pointer_t<decltype(copy)>;
    const AdamWPointers<Copy> a{master.data_as<float>(), grad.data_as<float>(), exp_avg.data_as<float>(),
                                exp_avg_sq.data_as<float>(), copy};
    launch_segments(ctx, step, a, segments);
  };
  if (param_out.defined() && param_out.dtype() == DType::kFloat16) {
    with(static_cast<__half*>(param_out.data()));
  } else {
    with(param_out.defined() ? static_cast<__nv_bfloat16*>(param_out.data()) : static_cast<__nv_bfloat16*>(nullptr));
  }
}

}  // namespace

void adamw_update(Context& ctx, const ops::AdamWStep& step, const Tensor& master, const Tensor& grad,
                  const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& param_out) {
  const ops::AdamWSegment whole{.offset = 0, .length = master.numel(), .weight_decay = true};
  launch(ctx, step, master, grad, exp_avg, exp_avg_sq, param_out, std::span<const ops::AdamWSegment>(&whole, 1));
}

void adamw_update_segments(Context& ctx, const ops::AdamWStep& step, const Tensor& master, const Tensor& grad,
                           const Tensor& exp_avg, const Tensor& exp_avg_sq, const Tensor& param_out,
                           std::span<const ops::AdamWSegment> segments) {
  launch(ctx, step, master, grad, exp_avg, exp_avg_sq, param_out, segments);
}

}  // namespace gpt::cuda_ops
