#include "unit/kernels/reference.h"

#include <algorithm>
#include <cmath>

namespace gpt::reference {

Vec matmul(const Vec& a, const Vec& b, int64_t m, int64_t n, int64_t k, bool ta, bool tb) {
  Vec c(static_cast<size_t>(m * n), 0.0);
  for (int64_t i = 0; i < m; ++i) {
    for (int64_t j = 0; j < n; ++j) {
      double total = 0;
      for (int64_t p = 0; p < k; ++p) total += (ta ? a[p * m + i] : a[i * k + p]) * (tb ? b[j * k + p] : b[p * n + j]);
      c[i * n + j] = total;
    }
  }
  return c;
}

double gelu(double x) { return 0.5 * x * (1 + std::tanh(std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x))); }

double gelu_derivative(double x) {
  const double u = std::sqrt(2 / M_PI) * (x + 0.044715 * x * x * x);
  const double du = std::sqrt(2 / M_PI) * (1 + 3 * 0.044715 * x * x);
  const double t = std::tanh(u);
  return 0.5 * (1 + t) + 0.5 * x * (1 - t * t) * du;
}

LayerNormResult layernorm(const Vec& x, const Vec& w, const Vec& b, int64_t rows, int64_t h, double eps) {
  LayerNormResult r{Vec(x.size()), Vec(static_cast<size_t>(rows)), Vec(static_cast<size_t>(rows))};
  for (int64_t i = 0; i < rows; ++i) {
    double mean = 0, variance = 0;
    for (int64_t j = 0; j < h; ++j) mean += x[i * h + j] / static_cast<double>(h);
    for (int64_t j = 0; j < h; ++j) variance += (x[i * h + j] - mean) * (x[i * h + j] - mean) / static_cast<double>(h);
    r.mean[i] = mean;
    r.rstd[i] = 1 / std::sqrt(variance + eps);
    for (int64_t j = 0; j < h; ++j) r.y[i * h + j] = (x[i * h + j] - mean) * r.rstd[i] * w[j] + b[j];
  }
  return r;
}

void layernorm_backward(const Vec& dy, const Vec& x, const Vec& w, int64_t rows, int64_t h, double eps, Vec& dx,
                        Vec& dw, Vec& db) {
  const LayerNormResult f = layernorm(x, w, Vec(static_cast<size_t>(h), 0.0), rows, h, eps);
  dx.assign(x.size(), 0.0);
  dw.assign(static_cast<size_t>(h), 0.0);
  db.assign(static_cast<size_t>(h), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    // Full Jacobian of the normalization: d xhat_j / d x_k = rstd (delta_jk - 1/h - xhat_j xhat_k / h).
    std::vector<double> xhat(static_cast<size_t>(h));
    for (int64_t j = 0; j < h; ++j) xhat[j] = (x[i * h + j] - f.mean[i]) * f.rstd[i];
    for (int64_t j = 0; j < h; ++j) {
      dw[j] += dy[i * h + j] * xhat[j];
      db[j] += dy[i * h + j];
      for (int64_t k = 0; k < h; ++k) {
        const double jacobian = f.rstd[i] * ((j == k ? 1.0 : 0.0) - 1.0 / h - xhat[j] * xhat[k] / h);
        dx[i * h + k] += dy[i * h + j] * w[j] * jacobian;
      }
    }
  }
}

namespace {
// Element c of part `part` (0..q-1 query heads, q key, q + 1 value) of group `group` at (t, batch).
int64_t qkv_at(const AttentionShape& sh, int64_t t, int64_t batch, int64_t group, int64_t part, int64_t c) {
  return ((t * sh.b + batch) * sh.groups + group) * (sh.q + 2) * sh.d + part * sh.d + c;
}
int64_t out_at(const AttentionShape& sh, int64_t t, int64_t batch, int64_t head, int64_t c) {
  return ((t * sh.b + batch) * sh.heads() + head) * sh.d + c;
}
double keep_at(const Vec& keep, const AttentionShape& sh, int64_t batch, int64_t head, int64_t i, int64_t j) {
  return keep.empty() ? 1.0 : keep[((batch * sh.heads() + head) * sh.s + i) * sh.s + j];
}
// Softmax of the scaled causal scores of query row i of (batch, head): p [i + 1]; returns the lse.
double attention_row(const Vec& qkv, const AttentionShape& sh, int64_t batch, int64_t head, int64_t i, double scale,
                     std::vector<double>& p) {
  const int64_t group = head / sh.q, member = head % sh.q;
  p.assign(static_cast<size_t>(i + 1), 0.0);
  double maximum = -INFINITY;
  for (int64_t j = 0; j <= i; ++j) {
    double dot = 0;
    for (int64_t c = 0; c < sh.d; ++c) {
      dot += qkv[qkv_at(sh, i, batch, group, member, c)] * qkv[qkv_at(sh, j, batch, group, sh.q, c)];
    }
    p[j] = scale * dot;
    maximum = std::max(maximum, p[j]);
  }
  double total = 0;
  for (double v : p) total += std::exp(v - maximum);
  for (double& v : p) v = std::exp(v - maximum) / total;
  return maximum + std::log(total);
}
}  // namespace

void attention(const Vec& qkv, const AttentionShape& sh, double scale, const Vec& keep, Vec& out, Vec& lse) {
  out.assign(static_cast<size_t>(sh.s * sh.b * sh.heads() * sh.d), 0.0);
  lse.assign(static_cast<size_t>(sh.b * sh.heads() * sh.s), 0.0);
  std::vector<double> p;
  for (int64_t batch = 0; batch < sh.b; ++batch) {
    for (int64_t head = 0; head < sh.heads(); ++head) {
      const int64_t group = head / sh.q;
      for (int64_t i = 0; i < sh.s; ++i) {
        lse[(batch * sh.heads() + head) * sh.s + i] = attention_row(qkv, sh, batch, head, i, scale, p);
        for (int64_t j = 0; j <= i; ++j) {
          const double weight = p[j] * keep_at(keep, sh, batch, head, i, j);
          for (int64_t c = 0; c < sh.d; ++c) {
            out[out_at(sh, i, batch, head, c)] += weight * qkv[qkv_at(sh, j, batch, group, sh.q + 1, c)];
          }
        }
      }
    }
  }
}

Vec attention_backward(const Vec& qkv, const Vec& dout, const AttentionShape& sh, double scale, const Vec& keep) {
  Vec dqkv(qkv.size(), 0.0);
  std::vector<double> p;
  for (int64_t batch = 0; batch < sh.b; ++batch) {
    for (int64_t head = 0; head < sh.heads(); ++head) {
      const int64_t group = head / sh.q, member = head % sh.q;
      for (int64_t i = 0; i < sh.s; ++i) {
        attention_row(qkv, sh, batch, head, i, scale, p);
        // out_i = sum_j p_j m_j v_j: d out_i / d p_j = m_j v_j; the softmax Jacobian
        // dp_j/dscore_l = p_j (delta_jl - p_l).
        std::vector<double> dp(static_cast<size_t>(i + 1));
        for (int64_t j = 0; j <= i; ++j) {
          const double m = keep_at(keep, sh, batch, head, i, j);
          for (int64_t c = 0; c < sh.d; ++c) {
            const double g = dout[out_at(sh, i, batch, head, c)];
            dp[j] += m * g * qkv[qkv_at(sh, j, batch, group, sh.q + 1, c)];
            dqkv[qkv_at(sh, j, batch, group, sh.q + 1, c)] += p[j] * m * g;
          }
        }
        for (int64_t l = 0; l <= i; ++l) {
          double dscore = 0;
          for (int64_t j = 0; j <= i; ++j) dscore += dp[j] * p[j] * ((j == l ? 1.0 : 0.0) - p[l]);
          for (int64_t c = 0; c < sh.d; ++c) {
            dqkv[qkv_at(sh, i, batch, group, member, c)] += dscore * scale * qkv[qkv_at(sh, l, batch, group, sh.q, c)];
            dqkv[qkv_at(sh, l, batch, group, sh.q, c)] += dscore * scale * qkv[qkv_at(sh, i, batch, group, member, c)];
          }
        }
      }
    }
  }
  return dqkv;
}

Vec cross_entropy(const Vec& logits, const std::vector<int32_t>& targets, int64_t rows, int64_t cols, int64_t valid) {
  Vec loss(static_cast<size_t>(rows));
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0;
    for (int64_t j = 0; j < valid; ++j) total += std::exp(logits[r * cols + j]);
    loss[r] = std::log(total) - logits[r * cols + targets[r]];
  }
  return loss;
}

Vec cross_entropy_backward(const Vec& logits, const std::vector<int32_t>& targets, int64_t rows, int64_t cols,
                           int64_t valid, double scale) {
  Vec gradient(logits.size(), 0.0);
  for (int64_t r = 0; r < rows; ++r) {
    double total = 0;
    for (int64_t j = 0; j < valid; ++j) total += std::exp(logits[r * cols + j]);
    for (int64_t j = 0; j < valid; ++j) {
      gradient[r * cols + j] = scale * (std::exp(logits[r * cols + j]) / total - (j == targets[r] ? 1.0 : 0.0));
    }
  }
  return gradient;
}


// ---- RMSNorm, SwiGLU, RoPE -----------------------------------------------------------------------

RmsNormResult rmsnorm(const Vec& x, const Vec& w, int64_t rows, int64_t h, double eps) {
  RmsNormResult r{Vec(x.size()), Vec(static_cast<size_t>(rows))};
  for (int64_t i = 0; i < rows; ++i) {
    double mean_square = 0;
    for (int64_t j = 0; j < h; ++j) mean_square += x[i * h + j] * x[i * h + j] / static_cast<double>(h);
    r.rstd[i] = 1 / std::sqrt(mean_square + eps);
    for (int64_t j = 0; j < h; ++j) r.y[i * h + j] = x[i * h + j] * r.rstd[i] * w[j];
  }
  return r;
}

void rmsnorm_backward(const Vec& dy, const Vec& x, const Vec& w, int64_t rows, int64_t h, double eps, Vec& dx,
                      Vec& dw) {
  const RmsNormResult f = rmsnorm(x, Vec(static_cast<size_t>(h), 1.0), rows, h, eps);
  dx.assign(x.size(), 0.0);
  dw.assign(static_cast<size_t>(h), 0.0);
  for (int64_t i = 0; i < rows; ++i) {
    // y_j = x_j r w_j with r = (mean(x^2) + eps)^(-1/2), dr/dx_k = -r^3 x_k / h:
    // dy_j/dx_k = w_j (delta_jk r - x_j x_k r^3 / h).
    const double r = f.rstd[i];
    for (int64_t j = 0; j < h; ++j) {
      dw[j] += dy[i * h + j] * x[i * h + j] * r;
      for (int64_t k = 0; k < h; ++k) {
        const double jacobian = w[j] * ((j == k ? r : 0.0) - x[i * h + j] * x[i * h + k] * r * r * r / h);
        dx[i * h + k] += dy[i * h + j] * jacobian;
      }
    }
  }
}

namespace {
double sigmoid(double g) { return 1 / (1 + std::exp(-g)); }
}  // namespace

Vec swiglu(const Vec& x, int64_t rows, int64_t f) {
  Vec y(static_cast<size_t>(rows * f));
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < f; ++j) {
      const double gate = x[i * 2 * f + j], up = x[i * 2 * f + f + j];
      y[i * f + j] = gate * sigmoid(gate) * up;
    }
  }
  return y;
}

Vec swiglu_backward(const Vec& x, const Vec& dy, int64_t rows, int64_t f) {
  Vec dx(x.size());
  for (int64_t i = 0; i < rows; ++i) {
    for (int64_t j = 0; j < f; ++j) {
      const double gate = x[i * 2 * f + j], up = x[i * 2 * f + f + j], s = sigmoid(gate);
      // d/dg (g s(g)) = s + g s (1 - s).
      dx[i * 2 * f + j] = dy[i * f + j] * up * (s + gate * s * (1 - s));
      dx[i * 2 * f + f + j] = dy[i * f + j] * gate * s;
    }
  }
  return dx;
}

Vec rope(const Vec& qkv, int64_t s, int64_t rows_per_position, int64_t heads_per_group, int64_t d, int64_t rotary_dim,
         double base, bool forward) {
  Vec out(qkv);
  const int64_t half = rotary_dim / 2, width = heads_per_group * d;
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t j = 0; j < half; ++j) {
      const float inv_freq = 1.0f / std::pow(static_cast<float>(base), static_cast<float>(2 * j) / static_cast<float>(rotary_dim));
      const double angle = static_cast<float>(t) * inv_freq;
      const double c = std::cos(angle), sn = forward ? std::sin(angle) : -std::sin(angle);
      for (int64_t row = t * rows_per_position; row < (t + 1) * rows_per_position; ++row) {
        for (int64_t head = 0; head + 1 < heads_per_group; ++head) {  // all but the value head
          const int64_t first = row * width + head * d;
          const double x1 = qkv[first + j], x2 = qkv[first + half + j];
          out[first + j] = x1 * c - x2 * sn;
          out[first + half + j] = x2 * c + x1 * sn;
        }
      }
    }
  }
  return out;
}

}  // namespace gpt::reference
