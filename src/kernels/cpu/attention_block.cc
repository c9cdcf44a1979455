// One block of context-parallel attention (op_list.inc's attention_block_forward/backward): the
// queries of some rows of this rank's qkv against the keys and values of some rows of a K/V block,
// masked by global positions. One (batch, group) per task over the context's threads, as
// cpu/attention.cc: gather into contiguous FP32 [n, d] matrices, scores through BLAS, softmax rows
// in FP32 with FP64 sums, the dropout mask regenerated from its global coordinates. Forward merges
// the block's output into the running (out, lse) with the log-sum-exp rule; backward recomputes
// the probabilities from the final lse (flash attention's rule), so the blocks' gradients add up to
// the whole attention's.
#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "kernels/copy_columns_check.h"
#include "kernels/cpu/attention_tasks.h"
#include "kernels/cpu/blas_threads.h"
#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/dropout_words.h"
#include "kernels/cpu/element.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {
namespace {

constexpr float kMinusInfinity = -std::numeric_limits<float>::infinity();

// qkv [s, b, groups, (q + 2) d], out [s, b, heads, d], kv [s_k, b, groups, w] with K and V in the
// last 2d of each group's row.
struct BlockShape {
  int64_t s, b, groups, q, d, heads, kv_rows, kv_width;
};

BlockShape block_shape(const Tensor& qkv, const Tensor& kv, const Tensor& out, const Tensor& lse,
                       const ops::AttentionBlock& block) {
  GPT_CHECK(qkv.rank() == 4 && out.rank() == 4 && kv.rank() == 4)
      << "attention block: qkv " << qkv.to_string() << ", kv " << kv.to_string() << ", out " << out.to_string();
  const int64_t s = qkv.size(0), b = qkv.size(1), groups = qkv.size(2), heads = out.size(2), d = out.size(3);
  GPT_CHECK(out.size(0) == s && out.size(1) == b && groups > 0 && d > 0 && heads % groups == 0)
      << "attention block: qkv " << qkv.to_string() << ", out " << out.to_string();
  const int64_t q = heads / groups;
  GPT_CHECK(qkv.size(3) == (q + 2) * d) << "attention block: qkv " << qkv.to_string() << " for out " << out.to_string();
  GPT_CHECK(kv.size(1) == b && kv.size(2) == groups && kv.size(3) >= 2 * d && kv.dtype() == qkv.dtype())
      << "attention block: kv " << kv.to_string() << " for qkv " << qkv.to_string();
  GPT_CHECK(lse.numel() == b * heads * s && lse.dtype() == DType::kFloat32)
      << "attention block: lse must be [b, heads, s] float32, got " << lse.to_string();
  GPT_CHECK(block.query_row >= 0 && block.query_rows >= 0 && block.query_row + block.query_rows <= s &&
            block.key_row >= 0 && block.key_rows >= 0 && block.key_row + block.key_rows <= kv.size(0))
      << "attention block rows: queries " << block.query_row << " + " << block.query_rows << " of " << s << ", keys "
      << block.key_row << " + " << block.key_rows << " of " << kv.size(0);
  GPT_CHECK(block.sequence > 0 && block.query_position + block.query_rows <= block.sequence &&
            block.key_position + block.key_rows <= block.sequence)
      << "attention block positions outside the sequence of " << block.sequence;
  return {s, b, groups, q, d, heads, kv.size(0), kv.size(3)};
}

// Keys of query row i that are not after it: [0, visible(i)).
int64_t visible_keys(const ops::AttentionBlock& block, int64_t i) {
  return std::clamp<int64_t>(block.query_position + i - block.key_position + 1, 0, block.key_rows);
}

template <typename T>
void gather_queries(const BlockShape& sh, const T* qkv, const ops::AttentionBlock& block, int64_t batch,
                    int64_t group, int64_t member, float* dst) {
  for (int64_t i = 0; i < block.query_rows; ++i) {
    const int64_t group_row = ((block.query_row + i) * sh.b + batch) * sh.groups + group;
    const T* row = qkv + group_row * (sh.q + 2) * sh.d + member * sh.d;
    for (int64_t j = 0; j < sh.d; ++j) dst[i * sh.d + j] = load(row, j);
  }
}

// part 0: keys, 1: values (the last 2d of the group's row).
template <typename T>
void gather_kv(const BlockShape& sh, const T* kv, const ops::AttentionBlock& block, int64_t batch, int64_t group,
               int part, float* dst) {
  const int64_t column = sh.kv_width - (2 - part) * sh.d;
  for (int64_t i = 0; i < block.key_rows; ++i) {
    const T* row = kv + (((block.key_row + i) * sh.b + batch) * sh.groups + group) * sh.kv_width + column;
    for (int64_t j = 0; j < sh.d; ++j) dst[i * sh.d + j] = load(row, j);
  }
}

// keep [nq, nk] = keep_ij / (1 - probability) for visible keys, 0 elsewhere (global coordinates).
void block_dropout_scales(const BlockShape& sh, const ops::DropoutMask& mask, const ops::AttentionBlock& block,
                          int64_t batch, int64_t head, float* keep) {
  const uint64_t threshold = ops::dropout_threshold(mask.probability);
  const float keep_scale = 1.0f / (1.0f - mask.probability);
  const auto sample = static_cast<uint64_t>(mask.sample_offset + batch);
  uint32_t words[kDropoutChunk];
  for (int64_t i = 0; i < block.query_rows; ++i) {
    const int64_t visible = visible_keys(block, i);
    const auto first_position = static_cast<uint64_t>(
        ((mask.row_offset + head) * block.sequence + block.query_position + i) * block.sequence + block.key_position);
    float* out = keep + i * block.key_rows;
    for (int64_t first = 0; first < visible; first += kDropoutChunk) {
      const int64_t count = std::min(kDropoutChunk, visible - first);
      dropout_words(mask.key, sample, first_position + static_cast<uint64_t>(first), count, words);
      for (int64_t j = 0; j < count; ++j) out[first + j] = words[j] >= threshold ? keep_scale : 0.0f;
    }
    for (int64_t j = visible; j < block.key_rows; ++j) out[j] = 0.0f;
  }
}

}  // namespace

void attention_block_forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv, const Tensor& kv,
                             float scale, const ops::AttentionBlock& block, const ops::DropoutMask& dropout) {
  const BlockShape sh = block_shape(qkv, kv, out, lse, block);
  GPT_CHECK(out.dtype() == qkv.dtype()) << "attention block output dtype";
  check_attention_dropout(dropout);
  const int64_t nq = block.query_rows, nk = block.key_rows;
  if (nq == 0) return;
  const int m = static_cast<int>(nq), n = static_cast<int>(nk), d = static_cast<int>(sh.d);
  use_blas_threads(1);
  dispatch_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = qkv.data_as<T>();
    const T* keys_values = kv.data_as<T>();
    T* result = out.data_as<T>();
    float* lse_data = lse.data_as<float>();
    parallel_for(ctx, sh.b * sh.groups, 1, [&](int64_t first, int64_t last) {
      // q, o [nq, d]; k, v [nk, d]; scores (and keep) [nq, nk]; the block's lse [nq].
      float* q = thread_scratch(2 * nq * sh.d + 2 * nk * sh.d + (dropout.enabled() ? 2 : 1) * nq * nk + nq);
      float* o = q + nq * sh.d;
      float* k = o + nq * sh.d;
      float* v = k + nk * sh.d;
      float* scores = v + nk * sh.d;
      float* block_lse = scores + nq * nk;
      float* keep = block_lse + nq;
      const auto gather_group = [&](int64_t batch, int64_t group) {
        gather_kv(sh, keys_values, block, batch, group, 0, k);
        gather_kv(sh, keys_values, block, batch, group, 1, v);
      };
      const auto run_head = [&](int64_t batch, int64_t group, int64_t member, int64_t head) {
        gather_queries(sh, in, block, batch, group, member, q);
        if (nk > 0) cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, d, scale, q, d, k, d, 0.0f, scores, n);
        // Softmax within the block over the visible keys (0 elsewhere), its log-sum-exp kept.
        for (int64_t i = 0; i < nq; ++i) {
          float* row = scores + i * nk;
          const int64_t visible = visible_keys(block, i);
          float row_max = kMinusInfinity;
          for (int64_t j = 0; j < visible; ++j) row_max = std::max(row_max, row[j]);
          double total = 0.0;
          for (int64_t j = 0; j < visible; ++j) {
            row[j] = std::exp(row[j] - row_max);
            total += row[j];
          }
          const float inverse = visible > 0 ? static_cast<float>(1.0 / total) : 0.0f;
          for (int64_t j = 0; j < visible; ++j) row[j] *= inverse;
          for (int64_t j = visible; j < nk; ++j) row[j] = 0.0f;
          block_lse[i] = visible > 0 ? row_max + static_cast<float>(std::log(total)) : kMinusInfinity;
        }
        if (dropout.enabled()) {
          block_dropout_scales(sh, dropout, block, batch, head, keep);
          for (int64_t e = 0; e < nq * nk; ++e) scores[e] *= keep[e];
        }
        if (nk > 0) {
          cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, m, d, n, 1.0f, scores, n, v, d, 0.0f, o, d);
        } else {
          std::fill(o, o + nq * sh.d, 0.0f);
        }
        // Merge into the running output: weights exp(lse_old - L) and exp(L_b - L).
        for (int64_t i = 0; i < nq; ++i) {
          const int64_t t = block.query_row + i;
          float& row_lse = lse_data[(batch * sh.heads + head) * sh.s + t];
          T* out_row = result + ((t * sh.b + batch) * sh.heads + head) * sh.d;
          const float lb = block_lse[i];
          if (!block.accumulate) {
            row_lse = lb;
            for (int64_t j = 0; j < sh.d; ++j) store(out_row, j, o[i * sh.d + j]);
            continue;
          }
          if (lb == kMinusInfinity) continue;
          const float old = row_lse;
          const float merged = old == kMinusInfinity
                                   ? lb
                                   : std::max(old, lb) + std::log1p(std::exp(-std::fabs(old - lb)));
          const float old_weight = old == kMinusInfinity ? 0.0f : std::exp(old - merged);
          const float block_weight = std::exp(lb - merged);
          for (int64_t j = 0; j < sh.d; ++j) {
            store(out_row, j, load(out_row, j) * old_weight + o[i * sh.d + j] * block_weight);
          }
          row_lse = merged;
        }
      };
      for_each_group_task(first, last, sh.groups, sh.q, gather_group, run_head);
    });
  });
}

void attention_block_backward(Context& ctx, const Tensor& dqkv, const Tensor& dkv, const Tensor& dout,
                              const Tensor& qkv, const Tensor& kv, const Tensor& out, const Tensor& lse, float scale,
                              const ops::AttentionBlock& block, const ops::DropoutMask& dropout) {
  const BlockShape sh = block_shape(qkv, kv, out, lse, block);
  GPT_CHECK(dqkv.numel() == qkv.numel() && dqkv.dtype() == qkv.dtype()) << "attention block dqkv";
  GPT_CHECK(dkv.numel() == kv.numel() && dkv.dtype() == kv.dtype()) << "attention block dkv";
  GPT_CHECK(dout.numel() == out.numel() && dout.dtype() == out.dtype()) << "attention block dout";
  check_attention_dropout(dropout);
  const int64_t nq = block.query_rows, nk = block.key_rows;
  if (nq == 0 || nk == 0) return;
  const int m = static_cast<int>(nq), n = static_cast<int>(nk), d = static_cast<int>(sh.d);
  use_blas_threads(1);
  dispatch_float_type(qkv.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = qkv.data_as<T>();
    const T* keys_values = kv.data_as<T>();
    const T* o = out.data_as<T>();
    const T* go = dout.data_as<T>();
    T* grad_qkv = dqkv.data_as<T>();
    T* grad_kv = dkv.data_as<T>();
    const float* lse_data = lse.data_as<float>();
    parallel_for(ctx, sh.b * sh.groups, 1, [&](int64_t first, int64_t last) {
      // q, dO, dq [nq, d], D [nq]; k, v, dk, dv [nk, d]; P, dP (and keep) [nq, nk].
      float* q = thread_scratch(3 * nq * sh.d + nq + 4 * nk * sh.d + (dropout.enabled() ? 3 : 2) * nq * nk);
      float* grad_o = q + nq * sh.d;
      float* dq = grad_o + nq * sh.d;
      float* row_dot = dq + nq * sh.d;
      float* k = row_dot + nq;
      float* v = k + nk * sh.d;
      float* dk = v + nk * sh.d;
      float* dv = dk + nk * sh.d;
      float* p = dv + nk * sh.d;
      float* dp = p + nq * nk;
      float* keep = dp + nq * nk;
      const auto gather_group = [&](int64_t batch, int64_t group) {
        gather_kv(sh, keys_values, block, batch, group, 0, k);
        gather_kv(sh, keys_values, block, batch, group, 1, v);
      };
      const auto run_head = [&](int64_t batch, int64_t group, int64_t member, int64_t head) {
        gather_queries(sh, in, block, batch, group, member, q);
        for (int64_t i = 0; i < nq; ++i) {
          const int64_t index = (((block.query_row + i) * sh.b + batch) * sh.heads + head) * sh.d;
          double dot = 0.0;
          for (int64_t j = 0; j < sh.d; ++j) {
            grad_o[i * sh.d + j] = load(go, index + j);
            dot += static_cast<double>(grad_o[i * sh.d + j]) * load(o, index + j);
          }
          row_dot[i] = static_cast<float>(dot);
        }
        // P = exp(scale q k^T - lse) on visible keys, 0 elsewhere.
        cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasTrans, m, n, d, scale, q, d, k, d, 0.0f, p, n);
        for (int64_t i = 0; i < nq; ++i) {
          const float row_lse = lse_data[(batch * sh.heads + head) * sh.s + block.query_row + i];
          const int64_t visible = visible_keys(block, i);
          for (int64_t j = 0; j < visible; ++j) p[i * nk + j] = std::exp(p[i * nk + j] - row_lse);
          for (int64_t j = visible; j < nk; ++j) p[i * nk + j] = 0.0f;
        }
        if (dropout.enabled()) block_dropout_scales(sh, dropout, block, batch, head, keep);
        // The group's dK and dV sum over its heads: the first head sets them (beta 0).
        head_backward(m, n, d, scale, member == 0 ? 0.0f : 1.0f, q, k, v, grad_o, row_dot, p,
                      dropout.enabled() ? keep : nullptr, dp, dq, dk, dv);
        for (int64_t i = 0; i < nq; ++i) {
          T* row = grad_qkv + (((block.query_row + i) * sh.b + batch) * sh.groups + group) * (sh.q + 2) * sh.d +
                   member * sh.d;
          for (int64_t j = 0; j < sh.d; ++j) store(row, j, load(row, j) + dq[i * sh.d + j]);
        }
      };
      const auto scatter_group = [&](int64_t batch, int64_t group) {
        for (int64_t i = 0; i < nk; ++i) {
          T* row = grad_kv + (((block.key_row + i) * sh.b + batch) * sh.groups + group) * sh.kv_width + sh.kv_width -
                   2 * sh.d;
          for (int64_t j = 0; j < sh.d; ++j) {
            store(row, j, load(row, j) + dk[i * sh.d + j]);
            store(row, sh.d + j, load(row, sh.d + j) + dv[i * sh.d + j]);
          }
        }
      };
      for_each_group_task(first, last, sh.groups, sh.q, gather_group, run_head, scatter_group);
    });
  });
}

void copy_columns(Context& ctx, const Tensor& out, int64_t out_column, const Tensor& in, int64_t in_column,
                  int64_t columns, bool accumulate) {
  check_copy_columns(out, out_column, in, in_column, columns);
  const Tensor a = out.as_matrix(), b = in.as_matrix();
  dispatch_float_type(out.dtype(), [&](auto tag) {
    using T = decltype(tag);
    T* dst = a.data_as<T>();
    const T* src = b.data_as<T>();
    for (int64_t r = 0; r < a.rows(); ++r) {
      T* to = dst + r * a.cols() + out_column;
      const T* from = src + r * b.cols() + in_column;
      if (accumulate) {
        for (int64_t j = 0; j < columns; ++j) store(to, j, load(to, j) + load(from, j));
      } else {
        std::copy(from, from + columns, to);
      }
    }
  });
}

}  // namespace gpt::cpu
