// Causal softmax attention, one (batch, key/value group) per task, the tasks split over the
// context's threads (each task's GEMMs on one BLAS thread; a task's result does not depend on
// which thread runs it): gather the group's k and v and
// each of its query heads into contiguous FP32 [s, d] matrices, S = q k^T through BLAS, masked
// softmax in FP32 keeping each row's log-sum-exp, optional dropout of the probabilities, O = P v.
// Backward recomputes P from the log-sum-exp (as flash attention does) instead of storing it, and
// regenerates the dropout mask from its coordinates; the key and value gradients of a group are
// accumulated over its query heads in order (deterministic).
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/cpu/attention_tasks.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/dropout_words.h"
#include "kernels/cpu/element.h"
#include "kernels/cpu/parallel.h"
#include "kernels/cpu/simd.h"

namespace gpt::cpu {
namespace {

// qkv [s, b, groups, (q + 2) d], out [s, b, heads = groups * q, d].
struct AttentionShape {
  int64_t s, b, groups, q, d, heads;
};

AttentionShape attention_shape(const Tensor& qkv, const Tensor& out) {
  GPT_CHECK_EQ(qkv.rank(), 4) << "qkv must be [s, b, groups, (q + 2) d], got " << qkv.to_string();
  GPT_CHECK_EQ(out.rank(), 4) << "attention output must be [s, b, heads, d], got " << out.to_string();
  const int64_t s = qkv.size(0), b = qkv.size(1), groups = qkv.size(2), heads = out.size(2), d = out.size(3);
  GPT_CHECK(out.size(0) == s && out.size(1) == b && groups > 0 && d > 0 && heads % groups == 0)
      << "attention shapes: qkv " << qkv.to_string() << ", out " << out.to_string();
  const int64_t q = heads / groups;
  GPT_CHECK(q > 0 && qkv.size(3) == (q + 2) * d)
      << "qkv last dim must be (q + 2) d = " << (q + 2) * d << ": qkv " << qkv.to_string() << ", out "
      << out.to_string();
  return {s, b, groups, q, d, heads};
}

// Element (position t, part p, j) of group `group`, batch `batch`: parts 0..q-1 are the group's
// query heads, part q its key head and part q + 1 its value head.
inline int64_t qkv_index(const AttentionShape& sh, int64_t t, int64_t batch, int64_t group, int64_t part, int64_t j) {
  return ((t * sh.b + batch) * sh.groups + group) * (sh.q + 2) * sh.d + part * sh.d + j;
}
inline int64_t out_index(const AttentionShape& sh, int64_t t, int64_t batch, int64_t head, int64_t j) {
  return ((t * sh.b + batch) * sh.heads + head) * sh.d + j;
}

template <typename T>
void gather_part(const AttentionShape& sh, const T* qkv, int64_t batch, int64_t group, int64_t part, float* dst) {
  for (int64_t t = 0; t < sh.s; ++t) {
    for (int64_t j = 0; j < sh.d; ++j) dst[t * sh.d + j] = load(qkv, qkv_index(sh, t, batch, group, part, j));
  }
}

// m [s, s] = keep_ij / (1 - probability) for j <= i (0 above the diagonal): the dropout mask of
// (batch, head), regenerated from kernels/dropout_mask.h's coordinates.
void dropout_scales(const AttentionShape& sh, const ops::DropoutMask& mask, int64_t batch, int64_t head, float* m) {
  const uint64_t threshold = ops::dropout_threshold(mask.probability);
  const float keep_scale = 1.0f / (1.0f - mask.probability);
  const auto sample = static_cast<uint64_t>(mask.sample_offset + batch);
  // The random words of row i's causal part (positions row .. row + i), a chunk at a time.
  uint32_t words[kDropoutChunk];
  for (int64_t i = 0; i < sh.s; ++i) {
    const auto row = static_cast<uint64_t>(((mask.row_offset + head) * sh.s + i) * sh.s);
    float* out = m + i * sh.s;
    for (int64_t first = 0; first <= i; first += kDropoutChunk) {
      const int64_t count = std::min(kDropoutChunk, i + 1 - first);
      dropout_words(mask.key, sample, row + static_cast<uint64_t>(first), count, words);
      for (int64_t j = 0; j < count; ++j) out[first + j] = words[j] >= threshold ? keep_scale : 0.0f;
    }
    for (int64_t j = i + 1; j < sh.s; ++j) out[j] = 0.0f;
  }
}

// Row i of scores [s, s] (j <= i): exp(score - lse_i); 0 above the diagonal. Vectorized
// (simd::exp; the diagonal block's tail through the same vector code).
GPT_CPU_CLONES void causal_exp_rows(float* p, int64_t s, const float* lse) {
  for (int64_t i = 0; i < s; ++i) {
    float* row = p + i * s;
    const simd::f32x8 shift = simd::splat(lse[i]);
    int64_t j = 0;
    for (; j + simd::kLanes <= i + 1; j += simd::kLanes) simd::store8(row + j, simd::exp(simd::load8(row + j) - shift));
    if (j <= i) simd::store_partial(row + j, i + 1 - j, simd::exp(simd::load_partial(row + j, i + 1 - j) - shift));
    for (j = i + 1; j < s; ++j) row[j] = 0.0f;
  }
}

// Causal softmax of scores [s, s] in place (0 above the diagonal), each row's log-sum-exp in lse:
// the row maximum, exp(score - maximum) summed in FP32 lanes and FP64 across them, normalized.
GPT_CPU_CLONES void causal_softmax_rows(float* scores, int64_t s, float* lse) {
  for (int64_t i = 0; i < s; ++i) {
    float* row = scores + i * s;
    const int64_t n = i + 1, vector_end = n / simd::kLanes * simd::kLanes;
    simd::f32x8 m = simd::splat(-std::numeric_limits<float>::infinity());
    for (int64_t j = 0; j < vector_end; j += simd::kLanes) m = simd::max(m, simd::load8(row + j));
    float row_max = simd::horizontal_max(m);
    for (int64_t j = vector_end; j < n; ++j) row_max = std::max(row_max, row[j]);
    const simd::f32x8 shift = simd::splat(row_max);
    simd::f32x8 lanes = simd::splat(0.0f);
    for (int64_t j = 0; j < vector_end; j += simd::kLanes) {
      const simd::f32x8 e = simd::exp(simd::load8(row + j) - shift);
      simd::store8(row + j, e);
      lanes += e;
    }
    double total = simd::horizontal_sum(lanes);
    if (vector_end < n) {
      const simd::f32x8 e = simd::exp(simd::load_partial(row + vector_end, n - vector_end) - shift);
      simd::store_partial(row + vector_end, n - vector_end, e);
      for (int64_t k = 0; k < n - vector_end; ++k) total += e[k];  // not the padding lanes
    }
    const float inverse = static_cast<float>(1.0 / total);
    for (int64_t j = 0; j < n; ++j) row[j] *= inverse;
    for (int64_t j = n; j < s; ++j) row[j] = 0.0f;
    lse[i] = row_max + static_cast<float>(std::log(total));
  }
}

// scores [s, s] = scale * q k^T, then P = exp(scores - lse) below the diagonal, 0 above.
void probabilities_from_lse(const AttentionShape& sh, const float* q, const float* k, const float* lse,
                            float scale, float* p) {
  const int s = static_cast<int>(sh.s), d = static_cast<int>(sh.d);
  cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, d, scale, q, d, k, d, 0.0f, p, s);
  causal_exp_rows(p, sh.s, lse);
}

}  // namespace

void attention_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, float scale,
                       const ops::DropoutMask& dropout) {
  const AttentionShape sh = attention_shape(qkv, out);
  GPT_CHECK(out.dtype() == qkv.dtype()) << "attention output dtype";
  GPT_CHECK(lse.numel() == sh.b * sh.heads * sh.s && lse.dtype() == DType::kFloat32)
      << "attention lse must be [b, heads, s] float32, got " << lse.to_string();
  check_attention_dropout(dropout);
  const int s = static_cast<int>(sh.s), d = static_cast<int>(sh.d);
  const int64_t sd = sh.s * sh.d, square = sh.s * sh.s;
  use_blas_threads(1);  // small per-head GEMMs: one BLAS thread each, (batch, group) over the pool
  dispatch_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = qkv.data_as<T>();
    T* result = out.data_as<T>();
    parallel_for(ctx, sh.b * sh.groups, 1, [&](int64_t first, int64_t last) {
      // Scratch of this thread: q, k, v, o [s, d]; scores [s, s] (and the dropout scales [s, s]).
      float* q = thread_scratch(4 * sd + (dropout.enabled() ? 2 : 1) * square);
      float* k = q + sd;
      float* v = k + sd;
      float* o = v + sd;
      float* scores = o + sd;
      float* keep = scores + square;
      const auto gather_group = [&](int64_t batch, int64_t group) {
        gather_part(sh, in, batch, group, sh.q, k);
        gather_part(sh, in, batch, group, sh.q + 1, v);
      };
      const auto run_head = [&](int64_t batch, int64_t group, int64_t member, int64_t head) {
        gather_part(sh, in, batch, group, member, q);
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, s, s, d, scale, q, d, k, d, 0.0f, scores, s);
        float* row_lse = lse.data_as<float>() + (batch * sh.heads + head) * sh.s;
        causal_softmax_rows(scores, sh.s, row_lse);
        if (dropout.enabled()) {
          dropout_scales(sh, dropout, batch, head, keep);
          for (int64_t e = 0; e < square; ++e) scores[e] *= keep[e];
        }
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, s, d, s, 1.0f, scores, s, v, d, 0.0f, o, d);
        for (int64_t t = 0; t < sh.s; ++t) {
          for (int64_t j = 0; j < sh.d; ++j) store(result, out_index(sh, t, batch, head, j), o[t * sh.d + j]);
        }
      };
      for_each_group_task(first, last, sh.groups, sh.q, gather_group, run_head);
    });
  });
}

void attention_backward(Context& ctx, const Tensor& dqkv, const Tensor& dout, const Tensor& qkv,
                        const Tensor& out, const Tensor& lse, float scale, const ops::DropoutMask& dropout) {
  const AttentionShape sh = attention_shape(qkv, out);
  GPT_CHECK(dqkv.numel() == qkv.numel() && dqkv.dtype() == qkv.dtype()) << "attention dqkv";
  GPT_CHECK(dout.numel() == out.numel()) << "attention dout";
  GPT_CHECK(lse.numel() == sh.b * sh.heads * sh.s) << "attention lse must be [b, heads, s]";
  check_attention_dropout(dropout);
  const int s = static_cast<int>(sh.s), d = static_cast<int>(sh.d);
  const int64_t sd = sh.s * sh.d, square = sh.s * sh.s;
  use_blas_threads(1);  // as in forward
  dispatch_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = qkv.data_as<T>();
    const T* o = out.data_as<T>();
    const T* go = dout.data_as<T>();
    T* result = dqkv.data_as<T>();
    parallel_for(ctx, sh.b * sh.groups, 1, [&](int64_t first, int64_t last) {
      // Scratch of this thread: q, k, v [s, d]; dO [s, d] and D [s]; dq, dk, dv [s, d]; P, dP [s, s]
      // (and the dropout scales M [s, s] with dropout).
      float* q = thread_scratch(7 * sd + sh.s + (dropout.enabled() ? 3 : 2) * square);
      float* k = q + sd;
      float* v = k + sd;
      float* grad_o = v + sd;
      float* dq = grad_o + sd;
      float* dk = dq + sd;
      float* dv = dk + sd;
      float* row_dot = dv + sd;  // D_i = sum_j dO_ij O_ij
      float* p = row_dot + sh.s;
      float* dp = p + square;
      float* keep = dp + square;  // with dropout: keep_ij / (1 - probability)
      const auto gather_group = [&](int64_t batch, int64_t group) {
        gather_part(sh, in, batch, group, sh.q, k);
        gather_part(sh, in, batch, group, sh.q + 1, v);
      };
      const auto run_head = [&](int64_t batch, int64_t group, int64_t member, int64_t head) {
        gather_part(sh, in, batch, group, member, q);
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
        if (dropout.enabled()) dropout_scales(sh, dropout, batch, head, keep);
        // The group's dK and dV sum over its heads: the first head sets them (beta 0).
        head_backward(s, s, d, scale, member == 0 ? 0.0f : 1.0f, q, k, v, grad_o, row_dot, p,
                      dropout.enabled() ? keep : nullptr, dp, dq, dk, dv);
        for (int64_t t = 0; t < sh.s; ++t) {
          for (int64_t j = 0; j < sh.d; ++j) store(result, qkv_index(sh, t, batch, group, member, j), dq[t * sh.d + j]);
        }
      };
      const auto scatter_group = [&](int64_t batch, int64_t group) {
        for (int64_t t = 0; t < sh.s; ++t) {
          for (int64_t j = 0; j < sh.d; ++j) {
            store(result, qkv_index(sh, t, batch, group, sh.q, j), dk[t * sh.d + j]);
            store(result, qkv_index(sh, t, batch, group, sh.q + 1, j), dv[t * sh.d + j]);
          }
        }
      };
      for_each_group_task(first, last, sh.groups, sh.q, gather_group, run_head, scatter_group);
    });
  });
}

}  // namespace gpt::cpu
