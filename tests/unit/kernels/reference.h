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

// qkv [s, b, heads, 3d] -> out [s, b, heads, d], lse [b, heads, s]; causal, scaled.
void attention(const Vec& qkv, int64_t s, int64_t b, int64_t heads, int64_t d, double scale, Vec& out, Vec& lse);
// Gradient of sum(dout * attention(qkv)) with respect to qkv, through the explicit softmax Jacobian.
Vec attention_backward(const Vec& qkv, const Vec& dout, int64_t s, int64_t b, int64_t heads, int64_t d, double scale);

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

}  // namespace gpt::reference
