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
int64_t qkv_at(int64_t t, int64_t batch, int64_t head, int part, int64_t j, int64_t b, int64_t heads, int64_t d) {
  return ((t * b + batch) * heads + head) * 3 * d + part * d + j;
}
}  // namespace

void attention(const Vec& qkv, int64_t s, int64_t b, int64_t heads, int64_t d, double scale, Vec& out, Vec& lse) {
  out.assign(static_cast<size_t>(s * b * heads * d), 0.0);
  lse.assign(static_cast<size_t>(b * heads * s), 0.0);
  for (int64_t batch = 0; batch < b; ++batch) {
    for (int64_t head = 0; head < heads; ++head) {
      for (int64_t i = 0; i < s; ++i) {
        std::vector<double> scores(static_cast<size_t>(i + 1));
        double maximum = -INFINITY;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) {
            dot += qkv[qkv_at(i, batch, head, 0, c, b, heads, d)] * qkv[qkv_at(j, batch, head, 1, c, b, heads, d)];
          }
          scores[j] = scale * dot;
          maximum = std::max(maximum, scores[j]);
        }
        double total = 0;
        for (double& v : scores) total += std::exp(v - maximum);
        lse[(batch * heads + head) * s + i] = maximum + std::log(total);
        for (int64_t j = 0; j <= i; ++j) {
          const double p = std::exp(scores[j] - maximum) / total;
          for (int64_t c = 0; c < d; ++c) {
            out[((i * b + batch) * heads + head) * d + c] += p * qkv[qkv_at(j, batch, head, 2, c, b, heads, d)];
          }
        }
      }
    }
  }
}

Vec attention_backward(const Vec& qkv, const Vec& dout, int64_t s, int64_t b, int64_t heads, int64_t d, double scale) {
  Vec dqkv(qkv.size(), 0.0);
  for (int64_t batch = 0; batch < b; ++batch) {
    for (int64_t head = 0; head < heads; ++head) {
      for (int64_t i = 0; i < s; ++i) {
        auto q = [&](int64_t c) { return qkv[qkv_at(i, batch, head, 0, c, b, heads, d)]; };
        std::vector<double> scores(static_cast<size_t>(i + 1)), p(static_cast<size_t>(i + 1));
        double maximum = -INFINITY, total = 0;
        for (int64_t j = 0; j <= i; ++j) {
          double dot = 0;
          for (int64_t c = 0; c < d; ++c) dot += q(c) * qkv[qkv_at(j, batch, head, 1, c, b, heads, d)];
          scores[j] = scale * dot;
          maximum = std::max(maximum, scores[j]);
        }
        for (int64_t j = 0; j <= i; ++j) total += std::exp(scores[j] - maximum);
        for (int64_t j = 0; j <= i; ++j) p[j] = std::exp(scores[j] - maximum) / total;
        // d out_i / d p_j = v_j; softmax Jacobian dp_j/dscore_l = p_j (delta_jl - p_l).
        std::vector<double> dp(static_cast<size_t>(i + 1));
        for (int64_t j = 0; j <= i; ++j) {
          for (int64_t c = 0; c < d; ++c) {
            const double g = dout[((i * b + batch) * heads + head) * d + c];
            dp[j] += g * qkv[qkv_at(j, batch, head, 2, c, b, heads, d)];
            dqkv[qkv_at(j, batch, head, 2, c, b, heads, d)] += p[j] * g;
          }
        }
        for (int64_t l = 0; l <= i; ++l) {
          double dscore = 0;
          for (int64_t j = 0; j <= i; ++j) dscore += dp[j] * p[j] * ((j == l ? 1.0 : 0.0) - p[l]);
          for (int64_t c = 0; c < d; ++c) {
            dqkv[qkv_at(i, batch, head, 0, c, b, heads, d)] += dscore * scale * qkv[qkv_at(l, batch, head, 1, c, b, heads, d)];
            dqkv[qkv_at(l, batch, head, 1, c, b, heads, d)] += dscore * scale * q(c);
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

}  // namespace gpt::reference
