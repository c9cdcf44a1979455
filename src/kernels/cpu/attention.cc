// Causal softmax attention, one (batch, head) at a time: gather q, k, v into contiguous FP32 [s, d]
// matrices, S = q k^T through BLAS, masked softmax in FP32 keeping each row's log-sum-exp, O = P v.
// Backward recomputes P from the log-sum-exp (as flash attention does) instead of storing it.
#include <cblas.h>

#include <cmath>
#include <limits>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/element.h"

namespace gpt::cpu {
namespace {

struct AttentionShape {
  int64_t s, b, heads, d;
};

AttentionShape attention_shape(const Tensor& qkv) {
  GPT_CHECK_EQ(qkv.rank(), 4) << "qkv must be [s, b, heads, 3d], got " << qkv.to_string();
  GPT_CHECK_EQ(qkv.size(3) % 3, 0) << "qkv last dim must be 3d";
  return {qkv.size(0), qkv.size(1), qkv.size(2), qkv.size(3) / 3};
}

// Element (position t, part p in {0: q, 1: k, 2: v}, j) of head `head`, batch `batch` in a
// [s, b, heads, 3d] tensor.
inline int64_t qkv_index(const AttentionShape& sh, int64_t t, int64_t batch, int64_t head, int part, int64_t j) {
  return ((t * sh.b + batch) * sh.heads + head) * 3 * sh.d + part * sh.d + j;
}
inline int64_t out_index(const AttentionShape& sh, int64_t t, int64_t batch, int64_t head, int64_t j) {
  return ((t * sh.b + batch) * sh.heads + head) * sh.d + j;
}

template <typename T>
void gather_part(const AttentionShape& sh, const T* qkv, int64_t batch, int64_t head, int part, float* dst) {
  for (int64_t t = 0; t < sh.s; ++t) {
    for (int64_t j = 0; j < sh.d; ++j) dst[t * sh.d + j] = load(qkv, qkv_index(sh, t, batch, head, part, j));
  }
}

// scores [s, s] = scale * q k^T, then P = exp(scores - lse) below the diagonal, 0 above.
void probabilities_from_lse(const AttentionShape& sh, const float* q, const float* k, const float* lse,
                            float scale, float* p) {
  const int s = static_cast<int>(sh.s), d = static_cast<int>(sh.d);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, d, scale, q, d, k, d, 0.0f, p, s);
  for (int64_t i = 0; i < sh.s; ++i) {
    for (int64_t j = 0; j < sh.s; ++j) p[i * sh.s + j] = j <= i ? std::exp(p[i * sh.s + j] - lse[i]) : 0.0f;
  }
}

}  // namespace

void attention_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, float scale) {
  const AttentionShape sh = attention_shape(qkv);
  GPT_CHECK(out.numel() == sh.s * sh.b * sh.heads * sh.d && out.dtype() == qkv.dtype()) << "attention output";
  GPT_CHECK(lse.numel() == sh.b * sh.heads * sh.s) << "attention lse must be [b, heads, s]";
  const int s = static_cast<int>(sh.s), d = static_cast<int>(sh.d);
  float* q = ctx.cpu_scratch(0, sh.s * sh.d);
  float* k = ctx.cpu_scratch(1, sh.s * sh.d);
  float* v = ctx.cpu_scratch(2, sh.s * sh.d);
  float* scores = ctx.cpu_scratch(3, sh.s * sh.s + sh.s * sh.d);
  float* o = scores + sh.s * sh.s;
  dispatch_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = qkv.data_as<T>();
    T* result = out.data_as<T>();
    for (int64_t batch = 0; batch < sh.b; ++batch) {
      for (int64_t head = 0; head < sh.heads; ++head) {
        gather_part(sh, in, batch, head, 0, q);
        gather_part(sh, in, batch, head, 1, k);
        gather_part(sh, in, batch, head, 2, v);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, d, scale, q, d, k, d, 0.0f, scores, s);
        float* row_lse = lse.data_as<float>() + (batch * sh.heads + head) * sh.s;
        for (int64_t i = 0; i < sh.s; ++i) {
          float* row = scores + i * sh.s;
          float row_max = -std::numeric_limits<float>::infinity();
          for (int64_t j = 0; j <= i; ++j) row_max = std::max(row_max, row[j]);
          double total = 0.0;
          for (int64_t j = 0; j <= i; ++j) {
            row[j] = std::exp(row[j] - row_max);
            total += row[j];
          }
          const float inverse = static_cast<float>(1.0 / total);
          for (int64_t j = 0; j <= i; ++j) row[j] *= inverse;
          for (int64_t j = i + 1; j < sh.s; ++j) row[j] = 0.0f;
          row_lse[i] = row_max + static_cast<float>(std::log(total));
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, d, s, 1.0f, scores, s, v, d, 0.0f, o, d);
        for (int64_t t = 0; t < sh.s; ++t) {
          for (int64_t j = 0; j < sh.d; ++j) store(result, out_index(sh, t, batch, head, j), o[t * sh.d + j]);
        }
      }
    }
  });
}

void attention_backward(Context& ctx, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& lse, float scale) {
  const AttentionShape sh = attention_shape(qkv);
  GPT_CHECK(dqkv.numel() == qkv.numel() && dqkv.dtype() == qkv.dtype()) << "attention dqkv";
  GPT_CHECK(dout.numel() == out.numel() && out.numel() == sh.s * sh.b * sh.heads * sh.d) << "attention dout";
  const int s = static_cast<int>(sh.s), d = static_cast<int>(sh.d);
  const int64_t sd = sh.s * sh.d;
  // Scratch: q, k, v, dO [s, d] each; then P and dP [s, s]; then dq, dk, dv [s, d].
  float* qkv32 = ctx.cpu_scratch(0, 3 * sd);
  float* q = qkv32;
  float* k = qkv32 + sd;
  float* v = qkv32 + 2 * sd;
  float* grad_o = ctx.cpu_scratch(1, sd + sh.s);
  float* row_dot = grad_o + sd;  // D_i = sum_j dO_ij O_ij
  float* p = ctx.cpu_scratch(2, 2 * sh.s * sh.s);
  float* dp = p + sh.s * sh.s;
  float* grads = ctx.cpu_scratch(3, 3 * sd);
  float* dq = grads;
  float* dk = grads + sd;
  float* dv = grads + 2 * sd;
  dispatch_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = qkv.data_as<T>();
    const T* o = out.data_as<T>();
    const T* go = dout.data_as<T>();
    T* result = dqkv.data_as<T>();
    for (int64_t batch = 0; batch < sh.b; ++batch) {
      for (int64_t head = 0; head < sh.heads; ++head) {
        gather_part(sh, in, batch, head, 0, q);
        gather_part(sh, in, batch, head, 1, k);
        gather_part(sh, in, batch, head, 2, v);
        for (int64_t t = 0; t < sh.s; ++t) {
          double dot = 0.0;
          for (int64_t j = 0; j < sh.d; ++j) {
            const int64_t index = out_index(sh, t, batch, head, j);
            grad_o[t * sh.d + j] = load(go, index);
            dot += static_cast<double>(grad_o[t * sh.d + j]) * load(o, index);
          }
          row_dot[t] = static_cast<float>(dot);
        }
        const float* row_lse = lse.data_as<float>() + (batch * sh.heads + head) * sh.s;
        probabilities_from_lse(sh, q, k, row_lse, scale, p);
        // dV = P^T dO;  dP = dO V^T;  dS = P * (dP - D);  dQ = scale dS K;  dK = scale dS^T Q
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s, d, s, 1.0f, p, s, grad_o, d, 0.0f, dv, d);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, d, 1.0f, grad_o, d, v, d, 0.0f, dp, s);
        for (int64_t i = 0; i < sh.s; ++i) {
          for (int64_t j = 0; j < sh.s; ++j) dp[i * sh.s + j] = p[i * sh.s + j] * (dp[i * sh.s + j] - row_dot[i]);
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, d, s, scale, dp, s, k, d, 0.0f, dq, d);
        cblas_sgemm(CblasRowMajor, CblasTrans, CblasNoTrans, s, d, s, scale, dp, s, q, d, 0.0f, dk, d);
        for (int64_t t = 0; t < sh.s; ++t) {
          for (int64_t j = 0; j < sh.d; ++j) {
            store(result, qkv_index(sh, t, batch, head, 0, j), dq[t * sh.d + j]);
            store(result, qkv_index(sh, t, batch, head, 1, j), dk[t * sh.d + j]);
            store(result, qkv_index(sh, t, batch, head, 2, j), dv[t * sh.d + j]);
          }
        }
      }
    }
  });
}

}  // namespace gpt::cpu
