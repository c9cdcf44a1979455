// The row machinery of the row-normalization kernels (row_norm_kernels.cuh, for LayerNorm and
// RMSNorm): a group of kGroup threads owns a row of h elements and keeps it in registers as kPacks
// packs of 16 bytes per thread; block shapes, the sum over a row group, pack loads and stores, and
// the choice of row configuration for h. Rows too long for registers use the multi-pass kernels
// (kMultipassThreads).
#pragma once

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/vector_io.cuh"

namespace gpt::cuda_kernels {

// A block holds kBlock / kGroup row groups (one when kGroup >= kBlock). Forward blocks have 256
// threads; backward blocks 128, because its threads hold four row-sized arrays (about 130
// registers at h = 768 in bf16) and smaller blocks pack more warps per multiprocessor.
constexpr int kForwardBlock = 256;
constexpr int kBackwardBlock = 128;
template <int kGroup, int kBlock>
constexpr int kRowsPerBlock = kGroup >= kBlock ? 1 : kBlock / kGroup;
template <int kGroup, int kBlock>
constexpr int kThreadsPerBlock = kGroup * kRowsPerBlock<kGroup, kBlock>;
constexpr int kMaxPacks = 4;  // packs per thread: 32 floats of a bf16 row, 16 of an fp32 row

// Sums v over the kGroup threads of this row (threadIdx.x < kGroup; threadIdx.y = row of the
// block); every thread gets the same bits. For kGroup > 32 it synchronizes the block, so all of
// the block's threads must call it: the row loops below iterate uniformly over the block.
template <int kGroup, int kCount>
__device__ __forceinline__ void group_sum(float (&v)[kCount], float* scratch /* [rows][kGroup/32][kCount] */) {
#pragma unroll
  for (int c = 0; c < kCount; ++c) v[c] = warp_sum(v[c]);
  if constexpr (kGroup > 32) {
    constexpr int kWarps = kGroup / 32;
    float* mine = scratch + threadIdx.y * kWarps * kCount;
    __syncthreads();  // the previous call's readers are done
    if (threadIdx.x % 32 == 0) {
#pragma unroll
      for (int c = 0; c < kCount; ++c) mine[(threadIdx.x / 32) * kCount + c] = v[c];
    }
    __syncthreads();
#pragma unroll
    for (int c = 0; c < kCount; ++c) {
      float total = 0.0f;
#pragma unroll
      for (int w = 0; w < kWarps; ++w) total += mine[w * kCount + c];
      v[c] = total;
    }
  }
}

// Elements [col, col + W) of a row of length h as float, 0 past the end. `vector`: h % W == 0 and
// the row is 16-byte aligned, so a pack is wholly inside or outside and is one access.
template <int W, typename T>
__device__ __forceinline__ void load_pack(const T* row, int64_t col, int64_t h, bool vector, float (&out)[W]) {
  if (vector) {
    if (col < h) {
      load_floats<W>(row + col, out);
    } else {
#pragma unroll
      for (int k = 0; k < W; ++k) out[k] = 0.0f;
    }
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) out[k] = col + k < h ? to_float(row[col + k]) : 0.0f;
  }
}
template <int W, typename T>
__device__ __forceinline__ void store_pack(T* row, int64_t col, int64_t h, bool vector, const float (&in)[W]) {
  if (vector) {
    if (col < h) store_floats<W>(row + col, in);
  } else {
#pragma unroll
    for (int k = 0; k < W; ++k) {
      if (col + k < h) row[col + k] = from_float<T>(in[k]);
    }
  }
}

// First column of pack p of a thread: packs are interleaved across the group, so that a warp's
// 16-byte accesses are contiguous.
template <int kGroup, int W>
__device__ __forceinline__ int64_t pack_column(int p) {
  return (static_cast<int64_t>(p) * kGroup + threadIdx.x) * W;
}

// The sum of one value over the row group (group_sum of a single count).
template <int kGroup>
__device__ __forceinline__ float group_sum(float v, float* scratch /* [rows][kGroup/32] */) {
  float values[1] = {v};
  group_sum<kGroup>(values, scratch);
  return values[0];
}

// Calls launch(Width<kGroup>{}, Width<kPacks>{}) for the smallest row group whose registers hold
// a row of h elements (at most kMaxGroup threads of kMaxPacks packs); false when none does.
template <typename T, int kMaxGroup, typename Launch>
bool with_row_config(int64_t h, Launch&& launch) {
  const int64_t packs = (h + kPackSize<T> - 1) / kPackSize<T>;
  if (packs <= 32) return launch(Width<32>{}, Width<1>{}), true;
  if (packs <= 64) return launch(Width<32>{}, Width<2>{}), true;
  if (packs <= 96) return launch(Width<32>{}, Width<3>{}), true;  // GPT-2 small: h = 768 in bf16
  if (packs <= 32 * kMaxPacks) return launch(Width<32>{}, Width<kMaxPacks>{}), true;
  if (packs <= 64 * kMaxPacks) return launch(Width<64>{}, Width<kMaxPacks>{}), true;
  if (packs <= 128 * kMaxPacks) return launch(Width<128>{}, Width<kMaxPacks>{}), true;
  if (packs <= 256 * kMaxPacks) return launch(Width<256>{}, Width<kMaxPacks>{}), true;
  if constexpr (kMaxGroup >= 512) {
    if (packs <= 512 * kMaxPacks) return launch(Width<512>{}, Width<kMaxPacks>{}), true;
  }
  return false;
}

constexpr int kMultipassThreads = 512;

}  // namespace gpt::cuda_kernels
