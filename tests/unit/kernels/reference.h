// A naive double-precision reference of every op, written from the math with plain loops and
// sharing no code with src/kernels/cpu. Matrices are row-major std::vector<double>.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace gpt::reference {

using Vec = std::vector<double>;

// c[m, n] = op(a) op(b) with a [m, k] (or [k, m] transposed) and b [k, n] (or [n, k]).
Vec matmul(const Vec& a, const Vec& b, int64_t m, int64_t n, int64_t k, bool transpose_a, bool transpose_b);
double gelu(double x);
double gelu_derivative(double x);

struct LayerNormResult {
  Vec y, mean, rstd;
};
LayerNormResult layernorm(const Vec& x, const Vec& w, const Vec& b, int64_t rows, int64_t h, double eps);
// Gradients of sum(dy * LayerNorm(x)).
void layernorm_backward(const Vec& dy, const Vec& x, const Vec& w, int64_t rows, int64_t h, double eps, Vec& dx,
                        Vec& dw, Vec& db);

// Causal scaled attention with grouped queries: qkv [s, b, groups, (q + 2) d] (per group q query
// heads, then the key head, then the value head) -> out [s, b, heads = groups q, d], lse
// [b, heads, s]; query head h = g q + j reads group g's key and value. `keep`: empty (no dropout)
// or the multipliers [b, heads, s, s] of the probabilities (keep_ij / (1 - p)), applied after the
// softmax; lse is that of the undropped scores.
struct AttentionShape {
  int64_t s, b, groups, q, d;
  int64_t heads() const { return groups * q; }
};
void attention(const Vec& qkv, const AttentionShape& shape, double scale, const Vec& keep, Vec& out, Vec& lse);
// Gradient of sum(dout * attention(qkv)) with respect to qkv, through the explicit softmax Jacobian.
Vec attention_backward(const Vec& qkv, const Vec& dout, const AttentionShape& shape, double scale, const Vec& keep);

// Per-row loss over the valid columns of a shard covering the whole vocabulary (start 0).
Vec cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t rows, int64_t cols, int64_t valid);
// d(scale * sum of losses)/d logits, zero on padding columns.
Vec cross_entropy_backward(const Vec& logits, const std::vector<int32_t>& targets, int64_t rows, int64_t cols,
                           int64_t valid, double scale);

// Central finite differences of f at x (for checking the analytic references themselves).
template <typename F>
Vec numeric_gradient(F f, Vec x, double step = 1e-6) {
  Vec gradient(x.size());
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + step;
    const double up = f(x);
    x[i] = saved - step;
    const double down = f(x);
    x[i] = saved;
    gradient[i] = (up - down) / (2 * step);
  }
  return gradient;
}


// ---- RMSNorm, SwiGLU, RoPE -----------------------------------------------------------------------

struct RmsNormResult {
  Vec y, rstd;
};
// y = x / sqrt(mean(x^2) + eps) * w over rows of length h.
RmsNormResult rmsnorm(const Vec& x, const Vec& w, int64_t rows, int64_t h, double eps);
// Gradients of sum(dy * RMSNorm(x)) with respect to x and w, through the full Jacobian.
void rmsnorm_backward(const Vec& dy, const Vec& x, const Vec& w, int64_t rows, int64_t h, double eps, Vec& dx, Vec& dw);

// x [rows, 2f] = [gate | up] -> y [rows, f] = gate * sigmoid(gate) * up.
Vec swiglu(const Vec& x, int64_t rows, int64_t f);
// Gradient of sum(dy * swiglu(x)) with respect to x [rows, 2f].
Vec swiglu_backward(const Vec& x, const Vec& dy, int64_t rows, int64_t f);

// RoPE on qkv [s, b * groups, (q + 2) d] (the first q + 1 heads of each group rotated, the value
// head copied), rotary_dim of each head rotated by +angle (forward) or -angle (backward: the
// transposed rotation). The angle t * inv_freq_j is the FP32 value the contract prescribes
// (inv_freq and the product rounded to float); its cosine and sine are taken in double.
Vec rope(const Vec& qkv, int64_t s, int64_t rows_per_position, int64_t heads_per_group, int64_t d, int64_t rotary_dim,
         double base, bool forward);

}  // namespace gpt::reference
