// Mixture-of-experts router ops (kernels/op_list.inc's contracts): the selection and its gradient,
// the load-balancing statistics and their gradient, the z-loss. E is small (up to a few hundred),
// so one warp owns one token row [E]: warp shuffles only, no block barriers, and the row math in
// double like the CPU reference (cpu/moe.cc), so both backends select the same experts. Top-k is k
// rounds of a warp argmax (larger value, ties to the lower expert). The statistics are summed
// without atomics in a fixed order: per-row scores to scratch, then fixed chunks of rows, then the
// chunks in order.
#include <climits>

#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kWarpsPerBlock = 4;
constexpr int kLanes = 32;
constexpr size_t kSharedLimit = 48 * 1024;  // dynamic shared memory without an opt-in

__device__ __forceinline__ double warp_sum_double(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}
__device__ __forceinline__ double warp_max_double(double v) {
  for (int offset = 16; offset > 0; offset >>= 1) v = fmax(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}
// The warp's largest (value, index), ties to the lower index; every lane gets it.
__device__ __forceinline__ void warp_argmax(double& value, int& index) {
  for (int offset = 16; offset > 0; offset >>= 1) {
    const double other = __shfl_xor_sync(0xffffffffu, value, offset);
    const int other_index = __shfl_xor_sync(0xffffffffu, index, offset);
    if (other > value || (other == value && other_index < index)) {
      value = other;
      index = other_index;
    }
  }
}
__device__ __forceinline__ double sigmoid(double x) { return 1.0 / (1.0 + exp(-x)); }

// (value, index) comes after (previous, previous_index) in the order (descending value, ascending index).
__device__ __forceinline__ bool after(double value, int index, double previous, int previous_index) {
  return value < previous || (value == previous && index > previous_index);
}

// The n-th entry (n >= 1) of v [count] in the order (descending value, ascending index), found by n
// rounds of a serial argmax over the entries after the previous round's; `sum` gets the n values'
// sum in that order. One lane's work: count is a group's size or the number of groups.
__device__ __forceinline__ void nth_largest(const double* v, int count, int n, double& value, int& index, double& sum) {
  value = INFINITY;
  index = -1;
  sum = 0.0;
  for (int round = 0; round < n; ++round) {
    int best = -1;
    for (int i = 0; i < count; ++i) {
      if (after(v[i], i, value, index) && (best < 0 || v[i] > v[best])) best = i;
    }
    value = v[best];
    index = best;
    sum += value;
  }
}

// The warp's k largest of sel [E] (destroyed: each pick becomes -inf); pick j goes to chosen[j].
__device__ __forceinline__ void warp_top_k(double* sel, int experts, int k, int* chosen) {
  const int lane = threadIdx.x % kLanes;
  __syncwarp();
  for (int j = 0; j < k; ++j) {
    double value = -INFINITY;
    int index = INT_MAX;
    for (int e = lane; e < experts; e += kLanes) {
      if (sel[e] > value) {
        value = sel[e];
        index = e;
      }
    }
    warp_argmax(value, index);
    if (lane == 0) {
      chosen[j] = index;
      sel[index] = -INFINITY;
    }
    __syncwarp();
  }
}

// This warp's slice of the dynamic shared memory: `per_warp` doubles.
__device__ __forceinline__ double* warp_shared(int64_t per_warp) {
  extern __shared__ double shared[];
  return shared + (threadIdx.x / kLanes) * per_warp;
}

// Rows handled by the calling warp: grid-stride over rows, one warp per row.
#define GPT_FOR_EACH_WARP_ROW(t, rows)                                                                     \
  for (int64_t t = blockIdx.x * static_cast<int64_t>(blockDim.x / kLanes) + threadIdx.x / kLanes; t < (rows); \
       t += static_cast<int64_t>(gridDim.x) * (blockDim.x / kLanes))

struct RouteArgs {
  int32_t* indices;  // [T, k]
  float* weights;    // [T, k]
  const float* logits;
  const float* bias;  // [E] or null
  int64_t rows;
  int experts, k, groups, group_topk;
  bool sigmoid, pre_softmax;
  double scaling;
};

// Shared per warp: v [E] (the weights' scores), sel [E] (the selection scores, consumed by the
// top-k), w [E] (the group scores, then the k picks' scores), chosen [E] ints.
__global__ void __launch_bounds__(kWarpsPerBlock * kLanes) route_kernel(RouteArgs a) {
  const int lane = threadIdx.x % kLanes, experts = a.experts;
  double* v = warp_shared(4 * static_cast<int64_t>(experts));
  double* sel = v + experts;
  double* w = sel + experts;
  int* chosen = reinterpret_cast<int*>(w + experts);
  GPT_FOR_EACH_WARP_ROW(t, a.rows) {
    const float* row = a.logits + t * experts;
    double top = -INFINITY;
    for (int e = lane; e < experts; e += kLanes) top = fmax(top, v[e] = row[e]);
    if (a.sigmoid) {
      for (int e = lane; e < experts; e += kLanes) sel[e] = (v[e] = sigmoid(v[e])) + (a.bias ? a.bias[e] : 0.0);
    } else if (a.pre_softmax) {
      top = warp_max_double(top);
      double sum = 0.0;
      for (int e = lane; e < experts; e += kLanes) sum += (v[e] = exp(v[e] - top));
      sum = warp_sum_double(sum);
      for (int e = lane; e < experts; e += kLanes) sel[e] = (v[e] /= sum);
    } else {
      for (int e = lane; e < experts; e += kLanes) sel[e] = v[e];
    }
    if (a.groups > 0 && a.group_topk > 0) {
      // Group scores: the sum of each group's top k / group_topk; then every expert outside the
      // top group_topk groups is masked (-inf).
      const int size = experts / a.groups;
      __syncwarp();
      for (int g = lane; g < a.groups; g += kLanes) {
        double value, sum;
        int index;
        nth_largest(sel + g * size, size, a.k / a.group_topk, value, index, sum);
        w[g] = sum;
      }
      __syncwarp();
      double last;
      int last_group;
      double unused;
      nth_largest(w, a.groups, a.group_topk, last, last_group, unused);
      for (int e = lane; e < experts; e += kLanes) {
        const int g = e / size;
        if (after(w[g], g, last, last_group)) sel[e] = -INFINITY;
      }
    }
    warp_top_k(sel, experts, a.k, chosen);
    if (lane == 0) {  // the weights, serially in the reference's order
      for (int j = 0; j < a.k; ++j) w[j] = v[chosen[j]];
      if (!a.sigmoid && !a.pre_softmax) {  // softmax over the k selected logits
        double largest = -INFINITY, sum = 0.0;
        for (int j = 0; j < a.k; ++j) largest = fmax(largest, w[j]);
        for (int j = 0; j < a.k; ++j) sum += (w[j] = exp(w[j] - largest));
        for (int j = 0; j < a.k; ++j) w[j] /= sum;
      }
      if (a.sigmoid && a.k > 1) {
        double sum = 0.0;
        for (int j = 0; j < a.k; ++j) sum += w[j];
        sum += 1e-20;
        for (int j = 0; j < a.k; ++j) w[j] /= sum;
      }
      for (int j = 0; j < a.k; ++j) {
        a.indices[t * a.k + j] = chosen[j];
        a.weights[t * a.k + j] = static_cast<float>(w[j] * a.scaling);
      }
    }
    __syncwarp();  // the next row reuses the scratch
  }
}

struct RouteBackwardArgs {
  float* dlogits;  // [T, E]
  const float* dweights;
  const float* logits;
  const int32_t* indices;
  int64_t rows;
  int experts, k;
  bool sigmoid, pre_softmax;
  double scaling;
};

// dlogits of one row: zeros (or the pre-softmax term) for every expert, then the selected experts'
// gradients written over them by the lanes owning the picks (after a __syncwarp, so in that order).
__global__ void __launch_bounds__(kWarpsPerBlock * kLanes) route_backward_kernel(RouteBackwardArgs a) {
  const int lane = threadIdx.x % kLanes, experts = a.experts, k = a.k;
  GPT_FOR_EACH_WARP_ROW(t, a.rows) {
    const float* row = a.logits + t * experts;
    const int32_t* idx = a.indices + t * k;
    const float* dw = a.dweights + t * k;
    float* out = a.dlogits + t * experts;
    if (a.sigmoid) {  // p_j = s_j / (sum s + eps) when k > 1, else s_j; s = sigmoid
      double z = 0.0, dot = 0.0;
      for (int j = lane; j < k; j += kLanes) {
        const double s = sigmoid(row[idx[j]]);
        z += s;
        dot += dw[j] * a.scaling * s;
      }
      z = warp_sum_double(z) + 1e-20;
      dot = warp_sum_double(dot);
      for (int e = lane; e < experts; e += kLanes) out[e] = 0.0f;
      __syncwarp();
      for (int j = lane; j < k; j += kLanes) {
        const double s = sigmoid(row[idx[j]]), dp = dw[j] * a.scaling;
        const double ds = k > 1 ? dp / z - dot / (z * z) : dp;
        out[idx[j]] = static_cast<float>(ds * s * (1.0 - s));
      }
    } else if (a.pre_softmax) {  // p_j = softmax(logits)[idx_j]: dlogits = p (ds - <p, ds>)
      double top = -INFINITY, sum = 0.0, dot = 0.0;
      for (int e = lane; e < experts; e += kLanes) top = fmax(top, static_cast<double>(row[e]));
      top = warp_max_double(top);
      for (int e = lane; e < experts; e += kLanes) sum += exp(row[e] - top);
      sum = warp_sum_double(sum);
      for (int j = lane; j < k; j += kLanes) dot += exp(row[idx[j]] - top) / sum * (dw[j] * a.scaling);
      dot = warp_sum_double(dot);
      for (int e = lane; e < experts; e += kLanes) out[e] = static_cast<float>(exp(row[e] - top) / sum * -dot);
      __syncwarp();
      for (int j = lane; j < k; j += kLanes) {
        const double p = exp(row[idx[j]] - top) / sum;
        out[idx[j]] = static_cast<float>(p * (dw[j] * a.scaling - dot));
      }
    } else {  // p = softmax over the k selected logits: dlogits_j = p_j (dp_j - <p, dp>)
      double top = -INFINITY, sum = 0.0, dot = 0.0;
      for (int j = lane; j < k; j += kLanes) top = fmax(top, static_cast<double>(row[idx[j]]));
      top = warp_max_double(top);
      for (int j = lane; j < k; j += kLanes) sum += exp(row[idx[j]] - top);
      sum = warp_sum_double(sum);
      for (int j = lane; j < k; j += kLanes) dot += exp(row[idx[j]] - top) / sum * (dw[j] * a.scaling);
      dot = warp_sum_double(dot);
      for (int e = lane; e < experts; e += kLanes) out[e] = 0.0f;
      __syncwarp();
      for (int j = lane; j < k; j += kLanes) {
        const double p = exp(row[idx[j]] - top) / sum;
        out[idx[j]] = static_cast<float>(p * (dw[j] * a.scaling - dot));
      }
    }
    __syncwarp();
  }
}

// The load-balancing scores of one row, s [E] into `s` (softmax, or sigmoid over its sum + eps).
__device__ __forceinline__ void aux_scores(const float* row, int experts, bool use_sigmoid, double* s) {
  const int lane = threadIdx.x % kLanes;
  double top = -INFINITY, sum = 0.0;
  if (use_sigmoid) {
    for (int e = lane; e < experts; e += kLanes) sum += (s[e] = sigmoid(row[e]));
  } else {
    for (int e = lane; e < experts; e += kLanes) top = fmax(top, static_cast<double>(row[e]));
    top = warp_max_double(top);
    for (int e = lane; e < experts; e += kLanes) sum += (s[e] = exp(row[e] - top));
  }
  sum = warp_sum_double(sum);
  if (use_sigmoid) sum += 1e-20;
  for (int e = lane; e < experts; e += kLanes) s[e] /= sum;
}

struct StatisticsArgs {
  double* scores;   // scratch [T, E]
  uint8_t* chosen;  // scratch [T, E]: 1 where the expert is among the row's top k
  const float* logits;
  int64_t rows;
  int experts, k;
  bool sigmoid;
};

// Pass 1, one warp per row: the scores and their top-k marks. Shared per warp: sel [E], picks [E].
__global__ void __launch_bounds__(kWarpsPerBlock * kLanes) statistics_rows_kernel(StatisticsArgs a) {
  const int lane = threadIdx.x % kLanes, experts = a.experts;
  double* sel = warp_shared(2 * static_cast<int64_t>(experts));
  int* picks = reinterpret_cast<int*>(sel + experts);
  GPT_FOR_EACH_WARP_ROW(t, a.rows) {
    double* s = a.scores + t * experts;
    uint8_t* marks = a.chosen + t * experts;
    aux_scores(a.logits + t * experts, experts, a.sigmoid, s);
    for (int e = lane; e < experts; e += kLanes) {
      sel[e] = s[e];
      marks[e] = 0;
    }
    warp_top_k(sel, experts, a.k, picks);
    for (int j = lane; j < a.k; j += kLanes) marks[picks[j]] = 1;
    __syncwarp();
  }
}

constexpr int kChunkRows = 64;  // rows of one group summed by one block in pass 2

// Pass 2: block (chunk c, group g) sums rows g + G i, i in chunk c, for every expert, in row order.
__global__ void statistics_chunks_kernel(double* partial_sums, double* partial_counts, const double* scores,
                                         const uint8_t* chosen, int64_t rows_per_group, int groups, int experts) {
  const int64_t chunk = blockIdx.x, g = blockIdx.y;
  const int64_t begin = chunk * kChunkRows;
  const int64_t end = begin + kChunkRows < rows_per_group ? begin + kChunkRows : rows_per_group;
  for (int e = threadIdx.x; e < experts; e += blockDim.x) {
    double sum = 0.0, count = 0.0;
    for (int64_t i = begin; i < end; ++i) {
      const int64_t t = g + groups * i;
      sum += scores[t * experts + e];
      count += chosen[t * experts + e];
    }
    partial_sums[(chunk * groups + g) * experts + e] = sum;
    partial_counts[(chunk * groups + g) * experts + e] = count;
  }
}

// Pass 3: each (group, expert) adds its chunks in order.
__global__ void statistics_finish_kernel(float* score_sums, float* counts, const double* partial_sums,
                                         const double* partial_counts, int64_t chunks, int groups, int experts) {
  const int64_t cells = static_cast<int64_t>(groups) * experts;
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < cells;
       i += static_cast<int64_t>(gridDim.x) * blockDim.x) {
    double sum = 0.0, count = 0.0;
    for (int64_t c = 0; c < chunks; ++c) {
      sum += partial_sums[c * cells + i];
      count += partial_counts[c * cells + i];
    }
    score_sums[i] = static_cast<float>(sum);
    counts[i] = static_cast<float>(count);
  }
}

struct RowLossArgs {
  float* dlogits;  // [T, E], accumulated into
  float* lse;      // [T]
  const float* logits;
  const float* coefficients;  // [G, E]
  int64_t rows, groups;
  int experts;
  bool sigmoid;
  float scale;
};

// dlogits += d/dlogits of sum_e c[t % G, e] s[t, e], one warp per row.
__global__ void __launch_bounds__(kWarpsPerBlock * kLanes) aux_backward_kernel(RowLossArgs a) {
  const int lane = threadIdx.x % kLanes, experts = a.experts;
  GPT_FOR_EACH_WARP_ROW(t, a.rows) {
    const float* row = a.logits + t * experts;
    const float* c = a.coefficients + (t % a.groups) * experts;
    float* out = a.dlogits + t * experts;
    double top = -INFINITY, sum = 0.0, dot = 0.0;
    if (a.sigmoid) {  // s_e = sig_e / Z: d sig_e = c_e / Z - <c, sig> / Z^2; d logit = d sig sig (1 - sig)
      for (int e = lane; e < experts; e += kLanes) {
        const double s = sigmoid(row[e]);
        sum += s;
        dot += c[e] * s;
      }
      const double z = warp_sum_double(sum) + 1e-20;
      dot = warp_sum_double(dot);
      for (int e = lane; e < experts; e += kLanes) {
        const double s = sigmoid(row[e]);
        out[e] += static_cast<float>((c[e] / z - dot / (z * z)) * s * (1.0 - s));
      }
    } else {  // d softmax: s (c - <s, c>)
      for (int e = lane; e < experts; e += kLanes) top = fmax(top, static_cast<double>(row[e]));
      top = warp_max_double(top);
      for (int e = lane; e < experts; e += kLanes) sum += exp(row[e] - top);
      sum = warp_sum_double(sum);
      for (int e = lane; e < experts; e += kLanes) dot += exp(row[e] - top) / sum * c[e];
      dot = warp_sum_double(dot);
      for (int e = lane; e < experts; e += kLanes) out[e] += static_cast<float>(exp(row[e] - top) / sum * (c[e] - dot));
    }
  }
}

// lse[t] = logsumexp of the row (kBackward false), or dlogits += scale lse[t] softmax(row).
template <bool kBackward>
__global__ void __launch_bounds__(kWarpsPerBlock * kLanes) logsumexp_kernel(RowLossArgs a) {
  const int lane = threadIdx.x % kLanes, experts = a.experts;
  GPT_FOR_EACH_WARP_ROW(t, a.rows) {
    const float* row = a.logits + t * experts;
    double top = -INFINITY, sum = 0.0;
    for (int e = lane; e < experts; e += kLanes) top = fmax(top, static_cast<double>(row[e]));
    top = warp_max_double(top);
    for (int e = lane; e < experts; e += kLanes) sum += exp(row[e] - top);
    sum = warp_sum_double(sum);
    if constexpr (!kBackward) {
      if (lane == 0) a.lse[t] = static_cast<float>(top + log(sum));
    } else {
      const double factor = static_cast<double>(a.scale) * a.lse[t];
      float* out = a.dlogits + t * experts;
      for (int e = lane; e < experts; e += kLanes) out[e] += static_cast<float>(factor * (exp(row[e] - top) / sum));
    }
  }
}

struct SinkhornArgs {
  int32_t* indices;  // [T, k]
  float* weights;    // [T, k]
  float* balanced;   // [T, E]
  const float* logits;
  int64_t run;       // rows of one segment (one block each)
  int experts, k, max_rounds;
  double tolerance, epsilon;
};

// One block per segment (kWarpsPerBlock warps). Shared: d1 [E], the previous round's d1 [E], the
// warps' column partial sums [warps, E] (row pass: warp w sums its rows t = w mod warps in order,
// lane e mod 32 owning column e: no atomics, a fixed order), then per warp sel [E] and chosen [k]
// ints for the top-k. The cost exp(logits) is recomputed each round (not stored).
__global__ void __launch_bounds__(kWarpsPerBlock * kLanes) sinkhorn_kernel(SinkhornArgs a) {
  const int lane = threadIdx.x % kLanes, warp = threadIdx.x / kLanes, warps = blockDim.x / kLanes;
  const int experts = a.experts;
  extern __shared__ double shared[];
  double* d1 = shared;
  double* previous = d1 + experts;
  double* partial = previous + experts;  // [warps, E]
  double* sel = partial + static_cast<int64_t>(warps) * experts + static_cast<int64_t>(warp) * (experts + a.k);
  int* chosen = reinterpret_cast<int*>(sel + experts);
  __shared__ double error;
  const int64_t first = blockIdx.x * a.run;
  const float* logits = a.logits + first * experts;
  const double row_share = 1.0 / static_cast<double>(a.run), column_share = 1.0 / static_cast<double>(experts);
  for (int e = threadIdx.x; e < experts; e += blockDim.x) d1[e] = previous[e] = 1.0;
  if (threadIdx.x == 0) error = 1e9;
  __syncthreads();
  for (int round = 0; error > a.tolerance && round < a.max_rounds; ++round) {
    double* own = partial + static_cast<int64_t>(warp) * experts;
    for (int e = lane; e < experts; e += kLanes) own[e] = 0.0;
    for (int64_t t = warp; t < a.run; t += warps) {  // d0_t, then its share of the column sums
      const float* row = logits + t * experts;
      double sum = 0.0;
      for (int e = lane; e < experts; e += kLanes) sum += d1[e] * exp(static_cast<double>(row[e]));
      const double d0 = row_share * (1.0 / (warp_sum_double(sum) + a.epsilon));
      for (int e = lane; e < experts; e += kLanes) own[e] += d0 * exp(static_cast<double>(row[e]));
    }
    __syncthreads();
    for (int e = threadIdx.x; e < experts; e += blockDim.x) {
      double column = 0.0;
      for (int w = 0; w < warps; ++w) column += partial[static_cast<int64_t>(w) * experts + e];
      previous[e] = d1[e];
      d1[e] = column_share * (1.0 / (column + a.epsilon));
    }
    __syncthreads();
    if (warp == 0) {  // mean |previous - d1|, in a fixed order
      double sum = 0.0;
      for (int e = lane; e < experts; e += kLanes) sum += fabs(previous[e] - d1[e]);
      sum = warp_sum_double(sum);
      if (lane == 0) error = sum / static_cast<double>(experts);
    }
    __syncthreads();
  }
  // balanced = d1 C d0 with the last round's d0 (from the previous d1); the top-k; the weights.
  for (int64_t t = warp; t < a.run; t += warps) {
    const float* row = logits + t * experts;
    double sum = 0.0, top = -INFINITY;
    for (int e = lane; e < experts; e += kLanes) {
      sum += previous[e] * exp(static_cast<double>(row[e]));
      top = fmax(top, static_cast<double>(row[e]));
    }
    const double d0 = row_share * (1.0 / (warp_sum_double(sum) + a.epsilon));
    float* out = a.balanced + (first + t) * experts;
    for (int e = lane; e < experts; e += kLanes) {
      const double n = d1[e] * exp(static_cast<double>(row[e])) * d0;
      out[e] = static_cast<float>(n);
      sel[e] = n;
    }
    top = warp_max_double(top);
    double total = 0.0;
    for (int e = lane; e < experts; e += kLanes) total += exp(row[e] - top);
    total = warp_sum_double(total);
    warp_top_k(sel, experts, a.k, chosen);
    for (int j = lane; j < a.k; j += kLanes) {
      const double logit = row[chosen[j]];
      a.indices[(first + t) * a.k + j] = chosen[j];
      a.weights[(first + t) * a.k + j] = static_cast<float>(a.k == 1 ? sigmoid(logit) : exp(logit - top) / total);
    }
    __syncwarp();  // the next row reuses the scratch
  }
}

#undef GPT_FOR_EACH_WARP_ROW

void check_router(const Tensor& logits, const Tensor& t, int64_t cols, DType dtype, const char* what) {
  GPT_CHECK(logits.dtype() == DType::kFloat32) << "router logits " << logits.to_string();
  GPT_CHECK(t.dtype() == dtype && t.rows() == logits.rows() && t.cols() == cols)
      << "MoE " << what << " " << t.to_string() << " for logits " << logits.to_string();
}

// Warps per block for a kernel with `per_warp` bytes of shared memory: up to kWarpsPerBlock
// within the default 48 KiB.
int warps_for(size_t per_warp, int64_t experts) {
  GPT_CHECK(per_warp <= kSharedLimit) << "MoE router kernels: " << experts << " experts exceed the shared memory of a row";
  const size_t fit = kSharedLimit / per_warp;
  return static_cast<int>(fit < kWarpsPerBlock ? fit : kWarpsPerBlock);
}

unsigned int row_grid(int64_t rows, int warps) { return grid_for(rows, warps); }

}  // namespace

void moe_route(Context& ctx, const Tensor& indices, const Tensor& weights, const Tensor& logits,
               const Tensor& expert_bias, const ops::RouterOptions& o) {
  const int64_t rows = logits.rows(), experts = logits.cols(), k = o.topk;
  check_router(logits, indices, k, DType::kInt32, "indices");
  check_router(logits, weights, k, DType::kFloat32, "weights");
  GPT_CHECK(!expert_bias.defined() || (o.sigmoid && expert_bias.numel() == experts && expert_bias.dtype() == DType::kFloat32))
      << "expert bias " << expert_bias.to_string();
  GPT_CHECK(k >= 1 && k <= experts) << "top-" << k << " of " << experts << " experts";
  const bool grouped = o.num_groups > 0 && o.group_topk > 0;
  GPT_CHECK(!grouped || (experts % o.num_groups == 0 && o.group_topk <= o.num_groups &&
                         k <= o.group_topk * (experts / o.num_groups) && k / o.group_topk <= experts / o.num_groups))
      << "top-" << k << " of " << experts << " experts in the top " << o.group_topk << " of " << o.num_groups << " groups";
  if (rows == 0) return;
  const size_t per_warp = 4 * static_cast<size_t>(experts) * sizeof(double);
  const int warps = warps_for(per_warp, experts);
  const RouteArgs a{indices.data_as<int32_t>(), weights.data_as<float>(), logits.data_as<float>(),
                    expert_bias.defined() ? expert_bias.data_as<float>() : nullptr, rows, static_cast<int>(experts),
                    static_cast<int>(k), static_cast<int>(grouped ? o.num_groups : 0),
                    static_cast<int>(grouped ? o.group_topk : 0), o.sigmoid, o.pre_softmax,
                    static_cast<double>(o.scaling)};
  route_kernel<<<row_grid(rows, warps), warps * kLanes, warps * per_warp, stream_of(ctx)>>>(a);
  GPT_CUDA_CHECK_LAUNCH();
}

void moe_sinkhorn_route(Context& ctx, const Tensor& indices, const Tensor& weights, const Tensor& balanced,
                        const Tensor& logits, int64_t segments) {
  const int64_t rows = logits.rows(), experts = logits.cols(), k = indices.cols();
  check_router(logits, indices, k, DType::kInt32, "indices");
  check_router(logits, weights, k, DType::kFloat32, "weights");
  check_router(logits, balanced, experts, DType::kFloat32, "sinkhorn scores");
  GPT_CHECK(k >= 1 && k <= experts && segments >= 1 && rows % segments == 0)
      << "sinkhorn top-" << k << " of " << experts << " experts over " << rows << " rows in " << segments << " runs";
  if (rows == 0) return;
  const size_t bytes = (static_cast<size_t>(2 + kWarpsPerBlock) * experts +
                        static_cast<size_t>(kWarpsPerBlock) * (experts + k)) * sizeof(double);
  GPT_CHECK(bytes <= kSharedLimit) << "MoE sinkhorn kernel: " << experts << " experts exceed its shared memory";
  const SinkhornArgs a{indices.data_as<int32_t>(), weights.data_as<float>(), balanced.data_as<float>(),
                       logits.data_as<float>(), rows / segments, static_cast<int>(experts), static_cast<int>(k),
                       ops::kSinkhornMaxRounds, ops::kSinkhornTolerance, ops::kSinkhornEpsilon};
  sinkhorn_kernel<<<static_cast<unsigned int>(segments), kWarpsPerBlock * kLanes, bytes, stream_of(ctx)>>>(a);
  GPT_CUDA_CHECK_LAUNCH();
}

void moe_route_backward(Context& ctx, const Tensor& dlogits, const Tensor& dweights, const Tensor& logits,
                        const Tensor& indices, const ops::RouterOptions& o) {
  const int64_t rows = logits.rows(), experts = logits.cols(), k = o.topk;
  check_router(logits, dlogits, experts, DType::kFloat32, "logit gradient");
  check_router(logits, dweights, k, DType::kFloat32, "weight gradient");
  check_router(logits, indices, k, DType::kInt32, "indices");
  if (rows == 0) return;
  const RouteBackwardArgs a{dlogits.data_as<float>(), dweights.data_as<float>(), logits.data_as<float>(),
                            indices.data_as<int32_t>(), rows, static_cast<int>(experts), static_cast<int>(k),
                            o.sigmoid, o.pre_softmax, static_cast<double>(o.scaling)};
  route_backward_kernel<<<row_grid(rows, kWarpsPerBlock), kWarpsPerBlock * kLanes, 0, stream_of(ctx)>>>(a);
  GPT_CUDA_CHECK_LAUNCH();
}

void moe_aux_statistics(Context& ctx, const Tensor& score_sums, const Tensor& counts, const Tensor& logits,
                        int64_t topk, bool use_sigmoid) {
  const int64_t rows = logits.rows(), experts = logits.cols(), groups = score_sums.rows();
  GPT_CHECK(logits.dtype() == DType::kFloat32 && score_sums.dtype() == DType::kFloat32 &&
            score_sums.cols() == experts && counts.dtype() == DType::kFloat32 && counts.rows() == groups &&
            counts.cols() == experts && groups >= 1 && rows % groups == 0 && topk >= 1 && topk <= experts)
      << "MoE statistics " << score_sums.to_string() << " " << counts.to_string() << " for " << logits.to_string();
  const int64_t rows_per_group = rows / groups, chunks = (rows_per_group + kChunkRows - 1) / kChunkRows;
  if (chunks == 0) {
    GPT_CUDA_CHECK(cudaMemsetAsync(score_sums.data(), 0, score_sums.bytes(), stream_of(ctx)));
    GPT_CUDA_CHECK(cudaMemsetAsync(counts.data(), 0, counts.bytes(), stream_of(ctx)));
    return;
  }
  // Scratch: scores [T, E] and partial sums and counts [chunks, G, E] in double, then marks [T, E].
  const size_t cells = static_cast<size_t>(rows * experts), partials = static_cast<size_t>(chunks * groups * experts);
  auto* scores = static_cast<double*>(ctx.cuda().scratch((cells + 2 * partials) * sizeof(double) + cells, "moe_aux_statistics"));
  double* partial_sums = scores + cells;
  double* partial_counts = partial_sums + partials;
  auto* marks = reinterpret_cast<uint8_t*>(partial_counts + partials);
  const size_t per_warp = 2 * static_cast<size_t>(experts) * sizeof(double);
  const int warps = warps_for(per_warp, experts);
  const StatisticsArgs a{scores, marks, logits.data_as<float>(), rows, static_cast<int>(experts), static_cast<int>(topk),
                         use_sigmoid};
  statistics_rows_kernel<<<row_grid(rows, warps), warps * kLanes, warps * per_warp, stream_of(ctx)>>>(a);
  GPT_CUDA_CHECK_LAUNCH();
  statistics_chunks_kernel<<<dim3(static_cast<unsigned int>(chunks), static_cast<unsigned int>(groups)), 128, 0,
                             stream_of(ctx)>>>(partial_sums, partial_counts, scores, marks, rows_per_group,
                                               static_cast<int>(groups), static_cast<int>(experts));
  GPT_CUDA_CHECK_LAUNCH();
  statistics_finish_kernel<<<grid_for(groups * experts, 256), 256, 0, stream_of(ctx)>>>(
      score_sums.data_as<float>(), counts.data_as<float>(), partial_sums, partial_counts, chunks,
      static_cast<int>(groups), static_cast<int>(experts));
  GPT_CUDA_CHECK_LAUNCH();
}

void moe_aux_backward(Context& ctx, const Tensor& dlogits, const Tensor& logits, const Tensor& coefficients,
                      bool use_sigmoid) {
  const int64_t rows = logits.rows(), experts = logits.cols(), groups = coefficients.rows();
  check_router(logits, dlogits, experts, DType::kFloat32, "logit gradient");
  GPT_CHECK(coefficients.dtype() == DType::kFloat32 && coefficients.cols() == experts && groups >= 1 && rows % groups == 0)
      << "MoE loss coefficients " << coefficients.to_string();
  if (rows == 0) return;
  RowLossArgs a{dlogits.data_as<float>(), nullptr, logits.data_as<float>(), coefficients.data_as<float>(), rows, groups,
                static_cast<int>(experts), use_sigmoid, 0.0f};
  aux_backward_kernel<<<row_grid(rows, kWarpsPerBlock), kWarpsPerBlock * kLanes, 0, stream_of(ctx)>>>(a);
  GPT_CUDA_CHECK_LAUNCH();
}

void moe_logsumexp(Context& ctx, const Tensor& lse, const Tensor& logits) {
  const int64_t rows = logits.rows(), experts = logits.cols();
  GPT_CHECK(logits.dtype() == DType::kFloat32 && lse.dtype() == DType::kFloat32 && lse.numel() == rows)
      << "MoE logsumexp " << lse.to_string() << " of " << logits.to_string();
  if (rows == 0) return;
  RowLossArgs a{nullptr, lse.data_as<float>(), logits.data_as<float>(), nullptr, rows, 1, static_cast<int>(experts), false, 0.0f};
  logsumexp_kernel<false><<<row_grid(rows, kWarpsPerBlock), kWarpsPerBlock * kLanes, 0, stream_of(ctx)>>>(a);
  GPT_CUDA_CHECK_LAUNCH();
}

void moe_z_loss_backward(Context& ctx, const Tensor& dlogits, const Tensor& logits, const Tensor& lse, float scale) {
  const int64_t rows = logits.rows(), experts = logits.cols();
  check_router(logits, dlogits, experts, DType::kFloat32, "logit gradient");
  GPT_CHECK(lse.dtype() == DType::kFloat32 && lse.numel() == rows) << "MoE logsumexp " << lse.to_string();
  if (rows == 0) return;
  RowLossArgs a{dlogits.data_as<float>(), lse.data_as<float>(), logits.data_as<float>(), nullptr, rows, 1,
                static_cast<int>(experts), false, scale};
  logsumexp_kernel<true><<<row_grid(rows, kWarpsPerBlock), kWarpsPerBlock * kLanes, 0, stream_of(ctx)>>>(a);
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt::cuda_ops
