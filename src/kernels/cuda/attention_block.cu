// One block of context-parallel attention on the GPU (op_list.inc's attention_block_forward and
// attention_block_backward), FP32 math, and copy_columns. Simple kernels in the manner of
// attention_reference.cu: forward one thread per (query row, head, batch) with an online softmax
// over the block's visible keys, then the log-sum-exp merge into the running output; backward one
// thread per (query row, head, batch) for dQ and one per (key row, group, batch) for dK and dV
// (summed over the group's query heads and the block's queries in order: no atomics). They re-read
// K and V per query: correct, not fast (the production form is cuDNN's fused attention per block
// with its statistics, which this build does not wire yet).
#include <limits>

#include "kernels/copy_columns_check.h"
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/cuda_ops.h"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kThreads = 128;
constexpr int kMaxHeadDim = 256;

// The items [0, items) of this thread, grid-stride: `for (const int64_t item : GridStride{items})`,
// so that any grid covers every item once.
struct GridStride {
  int64_t items;
  struct Iterator {
    int64_t item, stride;
    __device__ int64_t operator*() const { return item; }
    __device__ Iterator& operator++() {
      item += stride;
      return *this;
    }
    __device__ bool operator!=(int64_t end) const { return item < end; }
  };
  __device__ Iterator begin() const {
    return {blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x, static_cast<int64_t>(gridDim.x) * blockDim.x};
  }
  __device__ int64_t end() const { return items; }
};

struct BlockGeometry {
  int64_t s, b, groups, q, d, heads, kv_width;
  ops::AttentionBlock block;
  __device__ int64_t query(int64_t i, int64_t batch, int64_t head) const {
    return (((block.query_row + i) * b + batch) * groups + head / q) * (q + 2) * d + (head % q) * d;
  }
  // part 0: key, 1: value (the last 2d of the group's row of kv).
  __device__ int64_t kv(int64_t j, int64_t batch, int64_t group, int part) const {
    return (((block.key_row + j) * b + batch) * groups + group) * kv_width + kv_width - (2 - part) * d;
  }
  __device__ int64_t out(int64_t i, int64_t batch, int64_t head) const {
    return (((block.query_row + i) * b + batch) * heads + head) * d;
  }
  __device__ int64_t lse(int64_t i, int64_t batch, int64_t head) const {
    return (batch * heads + head) * s + block.query_row + i;
  }
  // Item `item` of the kernels with one thread per (query row i, head, batch), and the head's group.
  struct QueryItem {
    int64_t i, head, batch, group;
  };
  __device__ QueryItem query_item(int64_t item) const {
    const int64_t head = (item / b) % heads;
    return {item / (heads * b), head, item % b, head / q};
  }
  __device__ int64_t visible(int64_t i) const {
    const int64_t v = block.query_position + i - block.key_position + 1;
    return v < 0 ? 0 : (v > block.key_rows ? block.key_rows : v);
  }
};

struct BlockDropout {
  bool enabled;
  uint64_t key, threshold;
  int64_t sample_offset, row_offset;
  float keep_scale;
  __device__ float scale(const BlockGeometry& g, int64_t batch, int64_t head, int64_t i, int64_t j) const {
    if (!enabled) return 1.0f;
    const int64_t S = g.block.sequence;
    const auto position =
        static_cast<uint64_t>(((row_offset + head) * S + g.block.query_position + i) * S + g.block.key_position + j);
    return ops::dropout_keeps(key, static_cast<uint64_t>(sample_offset + batch), position, threshold) ? keep_scale
                                                                                                       : 0.0f;
  }
};

template <typename T>
__device__ float dot_rows(const T* a, const T* b, int64_t d) {
  float total = 0.0f;
  for (int64_t c = 0; c < d; ++c) total += to_float(a[c]) * to_float(b[c]);
  return total;
}

template <typename T>
__global__ void block_forward_kernel(T* out, float* lse, const T* qkv, const T* kv, BlockGeometry g, float scale,
                                     BlockDropout dropout) {
  const int64_t items = g.block.query_rows * g.heads * g.b;
  for (const int64_t item : GridStride{items}) {
    const auto [i, head, batch, group] = g.query_item(item);
    const int64_t visible = g.visible(i);
    const T* query = qkv + g.query(i, batch, head);
    float acc[kMaxHeadDim];
    for (int64_t c = 0; c < g.d; ++c) acc[c] = 0.0f;
    float row_max = -INFINITY, total = 0.0f;
    for (int64_t j = 0; j < visible; ++j) {
      const float score = scale * dot_rows(query, kv + g.kv(j, batch, group, 0), g.d);
      const float new_max = fmaxf(row_max, score);
      const float rescale = row_max == -INFINITY ? 0.0f : expf(row_max - new_max);
      const float weight = expf(score - new_max);
      total = total * rescale + weight;
      const float kept = weight * dropout.scale(g, batch, head, i, j);
      const T* value = kv + g.kv(j, batch, group, 1);
      for (int64_t c = 0; c < g.d; ++c) acc[c] = acc[c] * rescale + kept * to_float(value[c]);
      row_max = new_max;
    }
    const float block_lse = visible > 0 ? row_max + logf(total) : -INFINITY;
    T* out_row = out + g.out(i, batch, head);
    float& row_lse = lse[g.lse(i, batch, head)];
    if (!g.block.accumulate) {
      for (int64_t c = 0; c < g.d; ++c) out_row[c] = from_float<T>(visible > 0 ? acc[c] / total : 0.0f);
      row_lse = block_lse;
      continue;
    }
    if (visible == 0) continue;
    const float old = row_lse;
    const float merged = old == -INFINITY ? block_lse : fmaxf(old, block_lse) + log1pf(expf(-fabsf(old - block_lse)));
    const float old_weight = old == -INFINITY ? 0.0f : expf(old - merged);
    const float block_weight = expf(block_lse - merged) / total;
    for (int64_t c = 0; c < g.d; ++c) {
      out_row[c] = from_float<T>(to_float(out_row[c]) * old_weight + acc[c] * block_weight);
    }
    row_lse = merged;
  }
}

// D_i = dO_i . O_i.
template <typename T>
__device__ float row_dot(const T* dout, const T* out, const BlockGeometry& g, int64_t i, int64_t batch, int64_t head) {
  return dot_rows(dout + g.out(i, batch, head), out + g.out(i, batch, head), g.d);
}

// dQ_i += scale sum_j dS_ij K_j, dS_ij = P_ij (M_ij dO_i . V_j - D_i).
template <typename T>
__global__ void block_dq_kernel(T* dqkv, const T* dout, const T* qkv, const T* kv, const T* out, const float* lse,
                                BlockGeometry g, float scale, BlockDropout dropout) {
  const int64_t items = g.block.query_rows * g.heads * g.b;
  for (const int64_t item : GridStride{items}) {
    const auto [i, head, batch, group] = g.query_item(item);
    const int64_t visible = g.visible(i);
    const T* query = qkv + g.query(i, batch, head);
    const T* grad_out = dout + g.out(i, batch, head);
    const float D = row_dot(dout, out, g, i, batch, head), row_lse = lse[g.lse(i, batch, head)];
    float acc[kMaxHeadDim];
    for (int64_t c = 0; c < g.d; ++c) acc[c] = 0.0f;
    for (int64_t j = 0; j < visible; ++j) {
      const T* key = kv + g.kv(j, batch, group, 0);
      const float p = expf(scale * dot_rows(query, key, g.d) - row_lse);
      const float dp = dropout.scale(g, batch, head, i, j) * dot_rows(grad_out, kv + g.kv(j, batch, group, 1), g.d);
      const float ds = p * (dp - D);
      for (int64_t c = 0; c < g.d; ++c) acc[c] += ds * to_float(key[c]);
    }
    T* dq = dqkv + g.query(i, batch, head);
    for (int64_t c = 0; c < g.d; ++c) dq[c] = from_float<T>(to_float(dq[c]) + scale * acc[c]);
  }
}

// dK_j += scale sum_{h in group, i} dS_ij Q_i, dV_j += sum P_ij M_ij dO_i.
template <typename T>
__global__ void block_dkv_kernel(T* dkv, const T* dout, const T* qkv, const T* kv, const T* out, const float* lse,
                                 BlockGeometry g, float scale, BlockDropout dropout) {
  const int64_t items = g.block.key_rows * g.groups * g.b;
  for (const int64_t item : GridStride{items}) {
    const int64_t j = item / (g.groups * g.b), group = (item / g.b) % g.groups, batch = item % g.b;
    const T* key = kv + g.kv(j, batch, group, 0);
    const T* value = kv + g.kv(j, batch, group, 1);
    float dk[kMaxHeadDim], dv[kMaxHeadDim];
    for (int64_t c = 0; c < g.d; ++c) dk[c] = dv[c] = 0.0f;
    for (int64_t member = 0; member < g.q; ++member) {
      const int64_t head = group * g.q + member;
      for (int64_t i = 0; i < g.block.query_rows; ++i) {
        if (j >= g.visible(i)) continue;
        const T* query = qkv + g.query(i, batch, head);
        const T* grad_out = dout + g.out(i, batch, head);
        const float p = expf(scale * dot_rows(query, key, g.d) - lse[g.lse(i, batch, head)]);
        const float m = dropout.scale(g, batch, head, i, j);
        const float ds = p * (m * dot_rows(grad_out, value, g.d) - row_dot(dout, out, g, i, batch, head));
        for (int64_t c = 0; c < g.d; ++c) {
          dk[c] += scale * ds * to_float(query[c]);
          dv[c] += p * m * to_float(grad_out[c]);
        }
      }
    }
    T* grad_key = dkv + g.kv(j, batch, group, 0);
    T* grad_value = dkv + g.kv(j, batch, group, 1);
    for (int64_t c = 0; c < g.d; ++c) {
      grad_key[c] = from_float<T>(to_float(grad_key[c]) + dk[c]);
      grad_value[c] = from_float<T>(to_float(grad_value[c]) + dv[c]);
    }
  }
}

BlockGeometry block_geometry(const Tensor& qkv, const Tensor& kv, const Tensor& out, const Tensor& lse,
                             const ops::AttentionBlock& block) {
  GPT_CHECK(qkv.rank() == 4 && out.rank() == 4 && kv.rank() == 4)
      << "attention block: qkv " << qkv.to_string() << ", kv " << kv.to_string() << ", out " << out.to_string();
  BlockGeometry g{};
  g.s = qkv.size(0);
  g.b = qkv.size(1);
  g.groups = qkv.size(2);
  g.heads = out.size(2);
  g.d = out.size(3);
  GPT_CHECK(g.groups > 0 && g.heads % g.groups == 0 && g.d > 0 && g.d <= kMaxHeadDim)
      << "attention block: qkv " << qkv.to_string() << ", out " << out.to_string();
  g.q = g.heads / g.groups;
  g.kv_width = kv.size(3);
  GPT_CHECK(qkv.size(3) == (g.q + 2) * g.d && kv.size(1) == g.b && kv.size(2) == g.groups && g.kv_width >= 2 * g.d &&
            lse.numel() == g.b * g.heads * g.s && lse.dtype() == DType::kFloat32)
      << "attention block: qkv " << qkv.to_string() << ", kv " << kv.to_string() << ", lse " << lse.to_string();
  GPT_CHECK(block.query_row >= 0 && block.query_row + block.query_rows <= g.s && block.key_row >= 0 &&
            block.key_row + block.key_rows <= kv.size(0) && block.sequence > 0)
      << "attention block rows outside the tensors";
  g.block = block;
  return g;
}

BlockDropout block_dropout(const ops::DropoutMask& mask) {
  GPT_CHECK(mask.probability >= 0.0f && mask.probability < 1.0f) << "attention dropout " << mask.probability;
  return {mask.enabled(), mask.key, ops::dropout_threshold(mask.probability), mask.sample_offset, mask.row_offset,
          mask.enabled() ? 1.0f / (1.0f - mask.probability) : 1.0f};
}

template <typename T>
__global__ void copy_columns_kernel(T* out, int64_t out_cols, int64_t out_column, const T* in, int64_t in_cols,
                                    int64_t in_column, int64_t rows, int64_t columns) {
  const int64_t items = rows * columns;
  for (const int64_t item : GridStride{items}) {
    const int64_t r = item / columns, c = item % columns;
    T& to = out[r * out_cols + out_column + c];
    to = from_float<T>(to_float(to) + to_float(in[r * in_cols + in_column + c]));
  }
}

}  // namespace

void attention_block_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, const Tensor& kv,
                             float scale, const ops::AttentionBlock& block, const ops::DropoutMask& dropout) {
  const BlockGeometry g = block_geometry(qkv, kv, out, lse, block);
  const int64_t items = block.query_rows * g.heads * g.b;
  if (items == 0) return;
  dispatch_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    block_forward_kernel<T><<<grid_for(items, kThreads), kThreads, 0, stream_of(ctx)>>>(
        device_data<T>(out), device_data<float>(lse), device_data<T>(qkv), device_data<T>(kv), g, scale,
        block_dropout(dropout));
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void attention_block_backward(Context& ctx, const Tensor& dqkv, const Tensor& dkv, const Tensor& dout,
                              const Tensor& qkv, const Tensor& kv, const Tensor& out, const Tensor& lse, float scale,
                              const ops::AttentionBlock& block, const ops::DropoutMask& dropout) {
  const BlockGeometry g = block_geometry(qkv, kv, out, lse, block);
  GPT_CHECK(dqkv.numel() == qkv.numel() && dkv.numel() == kv.numel() && dout.numel() == out.numel())
      << "attention block gradients";
  if (block.query_rows == 0 || block.key_rows == 0) return;
  dispatch_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const BlockDropout mask = block_dropout(dropout);
    const int64_t query_items = block.query_rows * g.heads * g.b, key_items = block.key_rows * g.groups * g.b;
    block_dq_kernel<T><<<grid_for(query_items, kThreads), kThreads, 0, stream_of(ctx)>>>(
        device_data<T>(dqkv), device_data<T>(dout), device_data<T>(qkv), device_data<T>(kv), device_data<T>(out),
        device_data<float>(lse), g, scale, mask);
    GPT_CUDA_CHECK_LAUNCH();
    block_dkv_kernel<T><<<grid_for(key_items, kThreads), kThreads, 0, stream_of(ctx)>>>(
        device_data<T>(dkv), device_data<T>(dout), device_data<T>(qkv), device_data<T>(kv), device_data<T>(out),
        device_data<float>(lse), g, scale, mask);
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void copy_columns(Context& ctx, const Tensor& out, int64_t out_column, const Tensor& in, int64_t in_column,
                  int64_t columns, bool accumulate) {
  check_copy_columns(out, out_column, in, in_column, columns);
  const Tensor a = out.as_matrix(), b = in.as_matrix();
  if (a.rows() == 0 || columns == 0) return;
  const size_t element = dtype_size(a.dtype());
  if (!accumulate) {
    GPT_CUDA_CHECK(cudaMemcpy2DAsync(static_cast<char*>(a.data()) + out_column * element, a.cols() * element,
                                     static_cast<const char*>(b.data()) + in_column * element, b.cols() * element,
                                     columns * element, a.rows(), cudaMemcpyDeviceToDevice, stream_of(ctx)));
    return;
  }
  dispatch_float_type(a.dtype(), [&](auto tag) {
    using T = decltype(tag);
    copy_columns_kernel<T><<<grid_for(a.rows() * columns, kThreads), kThreads, 0, stream_of(ctx)>>>(
        device_data<T>(a), a.cols(), out_column, device_data<T>(b), b.cols(), in_column, a.rows(), columns);
  });
  GPT_CUDA_CHECK_LAUNCH();
}

}  // namespace gpt::cuda_ops
