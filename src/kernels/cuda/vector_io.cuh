// 16-byte vector loads and stores for the memory-bound kernels (8 bf16 or 4 fp32 per access), with
// the scalar path they fall back to. A kernel that vectorizes is written once, over "kWidth
// consecutive elements"; it is instantiated with kWidth = the vector width for the aligned body and
// kWidth = 1 for heads, tails and misaligned views, so both paths do the same float arithmetic per
// element. Views from Tensor::flat_range may start anywhere: launchers check alignment on the host
// (split_for_vectors, rows_vectorizable) and pick the path. Include only from src/kernels/cuda.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <type_traits>

#include "kernels/cuda/common.cuh"

namespace gpt::cuda_kernels {

constexpr int kVectorBytes = 16;
// Elements of T in one 16-byte access: 4 float or 8 bf16.
template <typename T>
constexpr int kPackSize = kVectorBytes / static_cast<int>(sizeof(T));

template <int N>
using Width = std::integral_constant<int, N>;

namespace detail {
template <typename T, int N>
struct alignas(sizeof(T) * N) Chunk {  // N * sizeof(T) is 8 or 16 bytes: one vector access
  T values[N];
};
}  // namespace detail

// out[k] = p[k] as float for k < kWidth. For kWidth > 1, p must be aligned to
// min(16, kWidth * sizeof(T)) bytes; wider groups (8 floats) are several 16-byte accesses.
template <int kWidth, typename T>
__device__ __forceinline__ void load_floats(const T* p, float (&out)[kWidth]) {
  constexpr int kBytes = kWidth * static_cast<int>(sizeof(T));
  if constexpr (kWidth == 1) {
    out[0] = to_float(*p);
  } else {
    constexpr int kChunkBytes = kBytes < kVectorBytes ? kBytes : kVectorBytes;
    static_assert(kChunkBytes == 8 || kChunkBytes == 16, "vector width must be 8 or 16 bytes");
    constexpr int kPerChunk = kChunkBytes / static_cast<int>(sizeof(T));
    using Chunk = detail::Chunk<T, kPerChunk>;
#pragma unroll
    for (int c = 0; c < kWidth / kPerChunk; ++c) {
      const Chunk chunk = reinterpret_cast<const Chunk*>(p)[c];
#pragma unroll
      for (int k = 0; k < kPerChunk; ++k) out[c * kPerChunk + k] = to_float(chunk.values[k]);
    }
  }
}

// p[k] = in[k] rounded to T, for k < kWidth; same alignment rule as load_floats.
template <int kWidth, typename T>
__device__ __forceinline__ void store_floats(T* p, const float (&in)[kWidth]) {
  constexpr int kBytes = kWidth * static_cast<int>(sizeof(T));
  if constexpr (kWidth == 1) {
    *p = from_float<T>(in[0]);
  } else {
    constexpr int kChunkBytes = kBytes < kVectorBytes ? kBytes : kVectorBytes;
    static_assert(kChunkBytes == 8 || kChunkBytes == 16, "vector width must be 8 or 16 bytes");
    constexpr int kPerChunk = kChunkBytes / static_cast<int>(sizeof(T));
    using Chunk = detail::Chunk<T, kPerChunk>;
#pragma unroll
    for (int c = 0; c < kWidth / kPerChunk; ++c) {
      Chunk chunk;
#pragma unroll
      for (int k = 0; k < kPerChunk; ++k) chunk.values[k] = from_float<T>(in[c * kPerChunk + k]);
      reinterpret_cast<Chunk*>(p)[c] = chunk;
    }
  }
}

// A pointer the vector path will access, with its element size (pointers of several dtypes mix,
// e.g. a float32 -> bfloat16 cast). Null pointers (absent optional operands) are ignored.
struct VectorOperand {
  const void* pointer;
  int element_bytes;
};
template <typename T>
VectorOperand operand(const T* pointer) {
  return {pointer, static_cast<int>(sizeof(T))};
}

// How a flat range of n elements splits: `head` scalar elements, then `groups` aligned groups of
// kWidth, then a scalar tail of n - head - groups * kWidth. When no head of fewer than kWidth
// elements aligns every operand (their misalignments differ), everything is the scalar head.
struct VectorSplit {
  int64_t head = 0;
  int64_t groups = 0;
};

inline bool aligned_to(const void* pointer, int64_t bytes) {
  return reinterpret_cast<uintptr_t>(pointer) % static_cast<uintptr_t>(bytes) == 0;
}

template <int kWidth>
VectorSplit split_for_vectors(int64_t n, std::initializer_list<VectorOperand> operands) {
  for (int64_t head = 0; head < kWidth && head <= n; ++head) {
    bool all_aligned = true;
    for (const VectorOperand& o : operands) {
      if (o.pointer == nullptr) continue;
      const int64_t alignment = kWidth * o.element_bytes < kVectorBytes ? kWidth * o.element_bytes : kVectorBytes;
      all_aligned = all_aligned && aligned_to(static_cast<const char*>(o.pointer) + head * o.element_bytes, alignment);
    }
    if (all_aligned) return {head, (n - head) / kWidth};
  }
  return {n, 0};
}

// Row-wise kernels vectorize when every row starts aligned: the row length is a multiple of the
// vector width and every operand (row-strided matrices and [h] vectors alike) is 16-byte aligned.
inline bool rows_vectorizable(int64_t h, int width, std::initializer_list<const void*> pointers) {
  if (h % width != 0) return false;
  for (const void* p : pointers) {
    if (p != nullptr && !aligned_to(p, kVectorBytes)) return false;
  }
  return true;
}

// Calls fn(Width<kWidth>{}, i) for each aligned group start i and fn(Width<1>{}, i) for every other
// element of [0, n), grid-stride, so any grid size covers every element exactly once.
template <int kWidth, typename Fn>
__device__ __forceinline__ void for_each_split(int64_t n, VectorSplit split, Fn&& fn) {
  const int64_t first = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x;
  const int64_t stride = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t g = first; g < split.groups; g += stride) fn(Width<kWidth>{}, split.head + g * kWidth);
  for (int64_t i = first; i < split.head; i += stride) fn(Width<1>{}, i);
  for (int64_t i = split.head + split.groups * kWidth + first; i < n; i += stride) fn(Width<1>{}, i);
}

// Blocks for a grid-stride kernel over `work_items` (one per thread): enough to cover the work,
// at most what the device keeps resident (full occupancy at this block size), at least one.
inline unsigned int resident_grid(Context& ctx, int64_t work_items, int threads_per_block) {
  const int64_t needed = (work_items + threads_per_block - 1) / threads_per_block;
  const int64_t resident = static_cast<int64_t>(ctx.cuda().multiprocessor_count()) * (2048 / threads_per_block);
  const int64_t blocks = needed < resident ? needed : resident;
  return static_cast<unsigned int>(blocks < 1 ? 1 : blocks);
}

// Blocks of `kernel` resident at once per multiprocessor at this block size and dynamic shared
// memory (asked once per kernel, block size and device, then cached).
int blocks_per_multiprocessor(Context& ctx, const void* kernel, int threads_per_block, size_t dynamic_smem);

// Blocks for a grid-stride kernel: the resident blocks of `kernel` on every multiprocessor, capped
// by the blocks the work needs. Deterministic for a given device, which matters where the grid
// fixes a reduction order.
template <typename Kernel>
unsigned int occupancy_grid(Context& ctx, Kernel kernel, int threads_per_block, size_t dynamic_smem,
                            int64_t blocks_needed) {
  const int64_t resident = static_cast<int64_t>(ctx.cuda().multiprocessor_count()) *
                           blocks_per_multiprocessor(ctx, reinterpret_cast<const void*>(kernel), threads_per_block,
                                                     dynamic_smem);
  const int64_t blocks = blocks_needed < resident ? blocks_needed : resident;
  return static_cast<unsigned int>(blocks < 1 ? 1 : blocks);
}

}  // namespace gpt::cuda_kernels
