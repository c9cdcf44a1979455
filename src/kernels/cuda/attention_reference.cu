// Exact causal attention on the GPU with FP32 math: one block per (query row, head, batch) or
// (key row, group, batch), scores kept in shared memory, the probabilities recomputed from the
// log-sum-exp in backward. It is not fast (it reads K and V once per query row): the production
// path is cuDNN's fused flash attention (attention_cudnn.cc); this one runs where cuDNN's does not
// apply (FP32, head dims cuDNN refuses, grouped-query attention, attention dropout,
// --attention-backend local) and is the GPU-side reference in tests.
//
// qkv [s, b, groups, (q + 2) d] (a group's q query heads, then its key and value heads), out
// [s, b, heads = groups q, d], lse [b, heads, s]; query head h reads group h / q's key and value.
// Attention dropout scales each probability by keep / (1 - p), the mask regenerated from its
// coordinates with kernels/dropout_mask.h's dropout_keeps (the CPU reference's mask bit for bit).
// The key/value gradients of a group are summed over its query heads inside one block, in head
// order: no atomics, deterministic.
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/attention_kernels.h"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kThreads = 128;

struct Geometry {
  int64_t s, b, groups, q, d, heads;
  // Part `part` (0..q-1: query heads, q: key, q + 1: value) of group `group` at (t, batch).
  __device__ int64_t qkv(int64_t t, int64_t batch, int64_t group, int64_t part) const {
    return ((t * b + batch) * groups + group) * (q + 2) * d + part * d;
  }
  __device__ int64_t query(int64_t t, int64_t batch, int64_t head) const { return qkv(t, batch, head / q, head % q); }
  __device__ int64_t key(int64_t t, int64_t batch, int64_t head) const { return qkv(t, batch, head / q, q); }
  __device__ int64_t value(int64_t t, int64_t batch, int64_t head) const { return qkv(t, batch, head / q, q + 1); }
  __device__ int64_t out(int64_t t, int64_t batch, int64_t head) const { return ((t * b + batch) * heads + head) * d; }
};

// The dropout of the probabilities [b, heads, s, s] (kernels/dropout_mask.h).
struct Dropout {
  bool enabled;
  uint64_t key, threshold;
  int64_t sample_offset, row_offset;
  float keep_scale;  // 1 / (1 - p)
  // keep_ij / (1 - p) for query row i, key j of (batch, local head); 1 without dropout.
  __device__ float scale(const Geometry& g, int64_t batch, int64_t head, int64_t i, int64_t j) const {
    if (!enabled) return 1.0f;
    const auto position = static_cast<uint64_t>(((row_offset + head) * g.s + i) * g.s + j);
    return ops::dropout_keeps(key, static_cast<uint64_t>(sample_offset + batch), position, threshold) ? keep_scale
                                                                                                       : 0.0f;
  }
};

template <typename T>
__device__ float dot(const float* a, const T* b, int64_t d) {
  float total = 0.0f;
  for (int64_t c = 0; c < d; ++c) total += a[c] * to_float(b[c]);
  return total;
}

// Block (i, head, batch): row i of the attention output.
template <typename T>
__global__ void forward_kernel(T* out, float* lse, const T* qkv, Geometry g, float scale, Dropout dropout) {
  extern __shared__ float shared[];
  float* q = shared;             // [d]
  float* scores = shared + g.d;  // [i + 1]
  const int64_t i = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) q[c] = to_float(qkv[g.query(i, batch, head) + c]);
  __syncthreads();
  float maximum = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    scores[j] = scale * dot(q, qkv + g.key(j, batch, head), g.d);
    maximum = fmaxf(maximum, scores[j]);
  }
  maximum = block_max(maximum);
  float total = 0.0f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    scores[j] = expf(scores[j] - maximum);
    total += scores[j];
  }
  total = block_sum(total);  // ends with a barrier: every score is written
  if (dropout.enabled) {     // the normalizer (and lse) stays that of the undropped scores
    for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) scores[j] *= dropout.scale(g, batch, head, i, j);
    __syncthreads();
  }
  const float inverse = 1.0f / total;
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) {
    float value = 0.0f;
    for (int64_t j = 0; j <= i; ++j) value += scores[j] * to_float(qkv[g.value(j, batch, head) + c]);
    out[g.out(i, batch, head) + c] = from_float<T>(value * inverse);
  }
  if (threadIdx.x == 0) lse[(batch * g.heads + head) * g.s + i] = maximum + logf(total);
}

// Block (i, head, batch): dq_i = scale sum_j ds_ij k_j with ds_ij = p_ij (m_ij do_i.v_j - D_i)
// (m: the dropout scales, 1 without dropout); also stores D_i = do_i.o_i for the key-side kernel.
template <typename T>
__global__ void backward_query_kernel(T* dqkv, float* row_dot, const T* dout, const T* qkv, const T* out,
                                      const float* lse, Geometry g, float scale, Dropout dropout) {
  extern __shared__ float shared[];
  float* q = shared;                  // [d]
  float* grad_out = shared + g.d;     // [d]
  float* ds = shared + 2 * g.d;       // [i + 1]
  const int64_t i = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  float partial_dot = 0.0f;
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) {
    q[c] = to_float(qkv[g.query(i, batch, head) + c]);
    grad_out[c] = to_float(dout[g.out(i, batch, head) + c]);
    partial_dot += grad_out[c] * to_float(out[g.out(i, batch, head) + c]);
  }
  const float d_i = block_sum(partial_dot);
  const float row_lse = lse[(batch * g.heads + head) * g.s + i];
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const float p = expf(scale * dot(q, qkv + g.key(j, batch, head), g.d) - row_lse);
    const float dp = dot(grad_out, qkv + g.value(j, batch, head), g.d) * dropout.scale(g, batch, head, i, j);
    ds[j] = p * (dp - d_i);
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) {
    float value = 0.0f;
    for (int64_t j = 0; j <= i; ++j) value += ds[j] * to_float(qkv[g.key(j, batch, head) + c]);
    dqkv[g.query(i, batch, head) + c] = from_float<T>(scale * value);
  }
  if (threadIdx.x == 0) row_dot[(batch * g.heads + head) * g.s + i] = d_i;
}

// Block (j, group, batch): over the group's query heads h, in order,
// dv_j = sum_h sum_{i >= j} m_ij p_ij do_i and dk_j = scale sum_h sum_{i >= j} ds_ij q_i.
template <typename T>
__global__ void backward_key_kernel(T* dqkv, const float* row_dot, const T* dout, const T* qkv, const float* lse,
                                    Geometry g, float scale, Dropout dropout) {
  extern __shared__ float shared[];
  float* k = shared;             // [d]
  float* v = shared + g.d;       // [d]
  float* dk = shared + 2 * g.d;  // [d] sums, each channel owned by one thread
  float* dv = shared + 3 * g.d;  // [d]
  float* p = shared + 4 * g.d;   // [s - j], the dropped probabilities of the current head
  float* ds = p + (g.s - blockIdx.x);
  const int64_t j = blockIdx.x, group = blockIdx.y, batch = blockIdx.z;
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) {
    k[c] = to_float(qkv[g.qkv(j, batch, group, g.q) + c]);
    v[c] = to_float(qkv[g.qkv(j, batch, group, g.q + 1) + c]);
    dk[c] = 0.0f;
    dv[c] = 0.0f;
  }
  __syncthreads();
  for (int64_t member = 0; member < g.q; ++member) {
    const int64_t head = group * g.q + member;
    const float* lse_row = lse + (batch * g.heads + head) * g.s;
    const float* dot_row = row_dot + (batch * g.heads + head) * g.s;
    for (int64_t i = j + threadIdx.x; i < g.s; i += blockDim.x) {
      const float pij = expf(scale * dot(k, qkv + g.query(i, batch, head), g.d) - lse_row[i]);
      const float mij = dropout.scale(g, batch, head, i, j);
      const float dp = dot(v, dout + g.out(i, batch, head), g.d) * mij;
      p[i - j] = pij * mij;
      ds[i - j] = pij * (dp - dot_row[i]);
    }
    __syncthreads();
    for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) {
      float dv_sum = 0.0f, dk_sum = 0.0f;
      for (int64_t i = j; i < g.s; ++i) {
        dv_sum += p[i - j] * to_float(dout[g.out(i, batch, head) + c]);
        dk_sum += ds[i - j] * to_float(qkv[g.query(i, batch, head) + c]);
      }
      dk[c] += dk_sum;
      dv[c] += dv_sum;
    }
    __syncthreads();  // p and ds are rewritten for the next head
  }
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) {
    dqkv[g.qkv(j, batch, group, g.q) + c] = from_float<T>(scale * dk[c]);
    dqkv[g.qkv(j, batch, group, g.q + 1) + c] = from_float<T>(dv[c]);
  }
}

Geometry geometry_of(const Tensor& qkv, const Tensor& out) {
  GPT_CHECK(qkv.rank() == 4 && out.rank() == 4)
      << "attention: qkv must be [s, b, groups, (q + 2) d] and out [s, b, heads, d], got " << qkv.to_string() << ", "
      << out.to_string();
  const int64_t s = qkv.size(0), b = qkv.size(1), groups = qkv.size(2), heads = out.size(2), d = out.size(3);
  GPT_CHECK(out.size(0) == s && out.size(1) == b && groups > 0 && d > 0 && heads % groups == 0 &&
            qkv.size(3) == (heads / groups + 2) * d)
      << "attention shapes: qkv " << qkv.to_string() << ", out " << out.to_string();
  return {s, b, groups, heads / groups, d, heads};
}

Dropout dropout_of(const ops::DropoutMask& mask) {
  GPT_CHECK(mask.probability >= 0.0f && mask.probability < 1.0f)
      << "attention dropout probability must be in [0, 1), got " << mask.probability;
  return {mask.enabled(), mask.key, ops::dropout_threshold(mask.probability), mask.sample_offset, mask.row_offset,
          1.0f / (1.0f - mask.probability)};
}

size_t shared_bytes(int64_t floats) {
  const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
  GPT_CHECK_LE(bytes, size_t{48} << 10) << "sequence too long for the reference attention kernel";
  return bytes;
}

}  // namespace

void reference_attention_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, float scale,
                                 const ops::DropoutMask& dropout) {
  const Geometry g = geometry_of(qkv, out);
  GPT_CHECK(out.dtype() == qkv.dtype() && lse.numel() == g.b * g.heads * g.s && lse.dtype() == DType::kFloat32)
      << "attention shapes";
  const Dropout mask = dropout_of(dropout);
  const dim3 grid(static_cast<unsigned int>(g.s), static_cast<unsigned int>(g.heads), static_cast<unsigned int>(g.b));
  dispatch_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T><<<grid, kThreads, shared_bytes(g.d + g.s), stream_of(ctx)>>>(
        device_data<T>(out), lse.data_as<float>(), device_data<T>(qkv), g, scale, mask);
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void reference_attention_backward(Context& ctx, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                  const Tensor& out, const Tensor& lse, float scale, const ops::DropoutMask& dropout) {
  const Geometry g = geometry_of(qkv, out);
  GPT_CHECK(dqkv.numel() == qkv.numel() && dqkv.dtype() == qkv.dtype() && dout.numel() == out.numel() &&
            dout.dtype() == out.dtype() && lse.numel() == g.b * g.heads * g.s)
      << "attention backward shapes";
  const Dropout mask = dropout_of(dropout);
  auto* row_dot = static_cast<float*>(ctx.cuda().scratch(g.b * g.heads * g.s * sizeof(float), "attention_backward"));
  const dim3 query_grid(static_cast<unsigned int>(g.s), static_cast<unsigned int>(g.heads),
                        static_cast<unsigned int>(g.b));
  const dim3 key_grid(static_cast<unsigned int>(g.s), static_cast<unsigned int>(g.groups),
                      static_cast<unsigned int>(g.b));
  dispatch_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    backward_query_kernel<T><<<query_grid, kThreads, shared_bytes(2 * g.d + g.s), stream_of(ctx)>>>(
        device_data<T>(dqkv), row_dot, device_data<T>(dout), device_data<T>(qkv), device_data<T>(out),
        lse.data_as<float>(), g, scale, mask);
    GPT_CUDA_CHECK_LAUNCH();
    backward_key_kernel<T><<<key_grid, kThreads, shared_bytes(4 * g.d + 2 * g.s), stream_of(ctx)>>>(
        device_data<T>(dqkv), row_dot, device_data<T>(dout), device_data<T>(qkv), lse.data_as<float>(), g, scale,
        mask);
    GPT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace gpt::cuda_ops
