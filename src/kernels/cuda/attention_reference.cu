// Exact causal attention on the GPU with FP32 math: one block per (query or key row, head, batch),
// scores kept in shared memory, the probabilities recomputed from the log-sum-exp in backward.
// It is not fast (it reads K and V once per query row): the production path is cuDNN's fused
// flash attention (attention_cudnn.cc); this one runs where cuDNN's does not apply (FP32, head
// dims cuDNN refuses, --attention-backend local) and is the GPU-side reference in tests.
//
// qkv [s, b, heads, 3d] (q, k, v of a head side by side), out [s, b, heads, d], lse [b, heads, s].
#include "kernels/cuda/common.cuh"
#include "kernels/cuda/attention_kernels.h"

namespace gpt::cuda_ops {
namespace {
using namespace gpt::cuda_kernels;

constexpr int kThreads = 128;

struct Geometry {
  int64_t s, b, heads, d;
  __device__ int64_t qkv(int64_t t, int64_t batch, int64_t head, int part) const {
    return ((t * b + batch) * heads + head) * 3 * d + part * d;
  }
  __device__ int64_t out(int64_t t, int64_t batch, int64_t head) const { return ((t * b + batch) * heads + head) * d; }
};

template <typename T>
__device__ float dot(const float* a, const T* b, int64_t d) {
  float total = 0.0f;
  for (int64_t c = 0; c < d; ++c) total += a[c] * to_float(b[c]);
  return total;
}

// Block (i, head, batch): row i of the attention output.
template <typename T>
__global__ void forward_kernel(T* out, float* lse, const T* qkv, Geometry g, float scale) {
  extern __shared__ float shared[];
  float* q = shared;             // [d]
  float* scores = shared + g.d;  // [i + 1]
  const int64_t i = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) q[c] = to_float(qkv[g.qkv(i, batch, head, 0) + c]);
  __syncthreads();
  float maximum = -INFINITY;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    scores[j] = scale * dot(q, qkv + g.qkv(j, batch, head, 1), g.d);
    maximum = fmaxf(maximum, scores[j]);
  }
  maximum = block_max(maximum);
  float total = 0.0f;
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    scores[j] = expf(scores[j] - maximum);
    total += scores[j];
  }
  total = block_sum(total);  // ends with a barrier: every score is written
  const float inverse = 1.0f / total;
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) {
    float value = 0.0f;
    for (int64_t j = 0; j <= i; ++j) value += scores[j] * to_float(qkv[g.qkv(j, batch, head, 2) + c]);
    out[g.out(i, batch, head) + c] = from_float<T>(value * inverse);
  }
  if (threadIdx.x == 0) lse[(batch * g.heads + head) * g.s + i] = maximum + logf(total);
}

// Block (i, head, batch): dq_i = scale sum_j ds_ij k_j with ds_ij = p_ij (do_i.v_j - D_i); also
// stores D_i = do_i.o_i for the key-side kernel.
template <typename T>
__global__ void backward_query_kernel(T* dqkv, float* row_dot, const T* dout, const T* qkv, const T* out,
                                      const float* lse, Geometry g, float scale) {
  extern __shared__ float shared[];
  float* q = shared;                  // [d]
  float* grad_out = shared + g.d;     // [d]
  float* ds = shared + 2 * g.d;       // [i + 1]
  const int64_t i = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  float partial_dot = 0.0f;
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) {
    q[c] = to_float(qkv[g.qkv(i, batch, head, 0) + c]);
    grad_out[c] = to_float(dout[g.out(i, batch, head) + c]);
    partial_dot += grad_out[c] * to_float(out[g.out(i, batch, head) + c]);
  }
  const float d_i = block_sum(partial_dot);
  const float row_lse = lse[(batch * g.heads + head) * g.s + i];
  for (int64_t j = threadIdx.x; j <= i; j += blockDim.x) {
    const float p = expf(scale * dot(q, qkv + g.qkv(j, batch, head, 1), g.d) - row_lse);
    const float dp = dot(grad_out, qkv + g.qkv(j, batch, head, 2), g.d);
    ds[j] = p * (dp - d_i);
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) {
    float value = 0.0f;
    for (int64_t j = 0; j <= i; ++j) value += ds[j] * to_float(qkv[g.qkv(j, batch, head, 1) + c]);
    dqkv[g.qkv(i, batch, head, 0) + c] = from_float<T>(scale * value);
  }
  if (threadIdx.x == 0) row_dot[(batch * g.heads + head) * g.s + i] = d_i;
}

// Block (j, head, batch): dv_j = sum_{i >= j} p_ij do_i and dk_j = scale sum_{i >= j} ds_ij q_i.
template <typename T>
__global__ void backward_key_kernel(T* dqkv, const float* row_dot, const T* dout, const T* qkv, const float* lse,
                                    Geometry g, float scale) {
  extern __shared__ float shared[];
  float* k = shared;                 // [d]
  float* v = shared + g.d;           // [d]
  float* p = shared + 2 * g.d;       // [s - j]
  float* ds = p + (g.s - blockIdx.x);
  const int64_t j = blockIdx.x, head = blockIdx.y, batch = blockIdx.z;
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) {
    k[c] = to_float(qkv[g.qkv(j, batch, head, 1) + c]);
    v[c] = to_float(qkv[g.qkv(j, batch, head, 2) + c]);
  }
  __syncthreads();
  const float* lse_row = lse + (batch * g.heads + head) * g.s;
  const float* dot_row = row_dot + (batch * g.heads + head) * g.s;
  for (int64_t i = j + threadIdx.x; i < g.s; i += blockDim.x) {
    const float pij = expf(scale * dot(k, qkv + g.qkv(i, batch, head, 0), g.d) - lse_row[i]);
    const float dp = dot(v, dout + g.out(i, batch, head), g.d);
    p[i - j] = pij;
    ds[i - j] = pij * (dp - dot_row[i]);
  }
  __syncthreads();
  for (int64_t c = threadIdx.x; c < g.d; c += blockDim.x) {
    float dv = 0.0f, dk = 0.0f;
    for (int64_t i = j; i < g.s; ++i) {
      dv += p[i - j] * to_float(dout[g.out(i, batch, head) + c]);
      dk += ds[i - j] * to_float(qkv[g.qkv(i, batch, head, 0) + c]);
    }
    dqkv[g.qkv(j, batch, head, 1) + c] = from_float<T>(scale * dk);
    dqkv[g.qkv(j, batch, head, 2) + c] = from_float<T>(dv);
  }
}

Geometry geometry_of(const Tensor& qkv) {
  GPT_CHECK(qkv.rank() == 4 && qkv.size(3) % 3 == 0) << "qkv must be [s, b, heads, 3d], got " << qkv.to_string();
  return {qkv.size(0), qkv.size(1), qkv.size(2), qkv.size(3) / 3};
}

size_t shared_bytes(int64_t floats) {
  const size_t bytes = static_cast<size_t>(floats) * sizeof(float);
  GPT_CHECK_LE(bytes, size_t{48} << 10) << "sequence too long for the reference attention kernel";
  return bytes;
}

}  // namespace

void reference_attention_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, float scale) {
  const Geometry g = geometry_of(qkv);
  GPT_CHECK(out.numel() == g.s * g.b * g.heads * g.d && lse.numel() == g.b * g.heads * g.s) << "attention shapes";
  const dim3 grid(static_cast<unsigned int>(g.s), static_cast<unsigned int>(g.heads), static_cast<unsigned int>(g.b));
  dispatch_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    forward_kernel<T><<<grid, kThreads, shared_bytes(g.d + g.s), stream_of(ctx)>>>(
        device_data<T>(out), lse.data_as<float>(), device_data<T>(qkv), g, scale);
  });
  GPT_CUDA_CHECK_LAUNCH();
}

void reference_attention_backward(Context& ctx, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                                  const Tensor& out, const Tensor& lse, float scale) {
  const Geometry g = geometry_of(qkv);
  GPT_CHECK(dqkv.numel() == qkv.numel() && dout.numel() == out.numel()) << "attention backward shapes";
  auto* row_dot = static_cast<float*>(ctx.cuda().scratch(g.b * g.heads * g.s * sizeof(float), "attention_backward"));
  const dim3 grid(static_cast<unsigned int>(g.s), static_cast<unsigned int>(g.heads), static_cast<unsigned int>(g.b));
  dispatch_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    backward_query_kernel<T><<<grid, kThreads, shared_bytes(2 * g.d + g.s), stream_of(ctx)>>>(
        device_data<T>(dqkv), row_dot, device_data<T>(dout), device_data<T>(qkv), device_data<T>(out),
        lse.data_as<float>(), g, scale);
    GPT_CUDA_CHECK_LAUNCH();
    backward_key_kernel<T><<<grid, kThreads, shared_bytes(2 * g.d + 2 * g.s), stream_of(ctx)>>>(
        device_data<T>(dqkv), row_dot, device_data<T>(dout), device_data<T>(qkv), lse.data_as<float>(), g, scale);
    GPT_CUDA_CHECK_LAUNCH();
  });
}

}  // namespace gpt::cuda_ops
