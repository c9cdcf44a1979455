// Mixture-of-experts ops (kernels/op_list.inc's contracts): the router's selection and its
// gradient, the load-balancing statistics, the z-loss, and the token permutation. Router math runs
// in double per row (the reference); the permutation's sums in FP32.
#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "kernels/cpu/cpu_ops.h"
#include "kernels/cpu/element.h"
#include "kernels/cpu/parallel.h"

namespace gpt::cpu {
namespace {

void check_router(const Tensor& logits, const Tensor& t, int64_t cols, DType dtype, const char* what) {
  GPT_CHECK(t.dtype() == dtype && t.rows() == logits.rows() && t.cols() == cols)
      << "MoE " << what << " " << t.to_string() << " for logits " << logits.to_string();
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

// softmax of v (in place), max-subtracted.
void softmax(std::vector<double>& v) {
  const double top = *std::max_element(v.begin(), v.end());
  double sum = 0.0;
  for (double& x : v) sum += (x = std::exp(x - top));
  for (double& x : v) x /= sum;
}

// The indices of the k largest of v among `allowed` (all when empty), by descending value, ties to
// the lower index.
std::vector<int64_t> top_indices(const std::vector<double>& v, int64_t k, const std::vector<bool>& allowed) {
  std::vector<int64_t> order;
  for (int64_t e = 0; e < static_cast<int64_t>(v.size()); ++e) {
    if (allowed.empty() || allowed[static_cast<size_t>(e)]) order.push_back(e);
  }
  GPT_CHECK(static_cast<int64_t>(order.size()) >= k) << "top-" << k << " of " << order.size() << " experts";
  std::partial_sort(order.begin(), order.begin() + k, order.end(), [&](int64_t a, int64_t b) {
    return v[static_cast<size_t>(a)] > v[static_cast<size_t>(b)] ||
           (v[static_cast<size_t>(a)] == v[static_cast<size_t>(b)] && a < b);
  });
  order.resize(static_cast<size_t>(k));
  return order;
}

// Group-limited selection's allowed experts: the top group_topk groups by the sum of their top
// (topk / group_topk) selection scores.
std::vector<bool> allowed_experts(const std::vector<double>& select, const ops::RouterOptions& o) {
  if (o.num_groups <= 0 || o.group_topk <= 0) return {};
  const int64_t experts = static_cast<int64_t>(select.size()), per_group = experts / o.num_groups;
  const int64_t per_group_topk = o.topk / o.group_topk;
  std::vector<double> group_scores(static_cast<size_t>(o.num_groups));
  for (int64_t g = 0; g < o.num_groups; ++g) {
    std::vector<double> members(select.begin() + g * per_group, select.begin() + (g + 1) * per_group);
    std::sort(members.begin(), members.end(), std::greater<double>());
    group_scores[static_cast<size_t>(g)] = std::accumulate(members.begin(), members.begin() + per_group_topk, 0.0);
  }
  std::vector<bool> allowed(static_cast<size_t>(experts), false);
  for (int64_t g : top_indices(group_scores, o.group_topk, {})) {
    std::fill(allowed.begin() + g * per_group, allowed.begin() + (g + 1) * per_group, true);
  }
  return allowed;
}

std::vector<double> row_of(const float* logits, int64_t row, int64_t experts) {
  return std::vector<double>(logits + row * experts, logits + (row + 1) * experts);
}

// s as the load-balancing losses see it: softmax, or sigmoid normalized over all experts.
std::vector<double> aux_scores(std::vector<double> v, bool use_sigmoid) {
  if (!use_sigmoid) {
    softmax(v);
    return v;
  }
  double sum = 0.0;
  for (double& x : v) sum += (x = sigmoid(x));
  for (double& x : v) x /= sum + 1e-20;
  return v;
}

}  // namespace

void moe_route(Context& ctx, const Tensor& indices, const Tensor& weights, const Tensor& logits,
               const Tensor& expert_bias, const ops::RouterOptions& o) {
  const int64_t rows = logits.rows(), experts = logits.cols(), k = o.topk;
  GPT_CHECK(logits.dtype() == DType::kFloat32) << "router logits " << logits.to_string();
  check_router(logits, indices, k, DType::kInt32, "indices");
  check_router(logits, weights, k, DType::kFloat32, "weights");
  GPT_CHECK(!expert_bias.defined() || (o.sigmoid && expert_bias.numel() == experts)) << "expert bias";
  // Groups partition the experts, and each group holds the k / group_topk experts its score sums.
  GPT_CHECK(o.num_groups <= 0 || o.group_topk <= 0 ||
            (experts % o.num_groups == 0 && k / o.group_topk <= experts / o.num_groups))
      << "MoE router groups: " << o.num_groups << " groups of " << experts << " experts, top-" << k << " in "
      << o.group_topk;
  const float* in = logits.data_as<float>();
  const float* bias = optional_data<float>(expert_bias);
  parallel_for(ctx, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      std::vector<double> v = row_of(in, t, experts), select = v;
      if (o.sigmoid) {
        for (int64_t e = 0; e < experts; ++e) {
          v[static_cast<size_t>(e)] = sigmoid(v[static_cast<size_t>(e)]);
          select[static_cast<size_t>(e)] = v[static_cast<size_t>(e)] + (bias ? double{bias[e]} : 0.0);
        }
      } else if (o.pre_softmax) {
        softmax(v);
        select = v;
      }
      const std::vector<int64_t> chosen = top_indices(select, k, allowed_experts(select, o));
      std::vector<double> w(static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j) w[static_cast<size_t>(j)] = v[static_cast<size_t>(chosen[static_cast<size_t>(j)])];
      if (!o.sigmoid && !o.pre_softmax) softmax(w);
      if (o.sigmoid && k > 1) {
        const double sum = std::accumulate(w.begin(), w.end(), 0.0) + 1e-20;
        for (double& x : w) x /= sum;
      }
      for (int64_t j = 0; j < k; ++j) {
        indices.data_as<int32_t>()[t * k + j] = static_cast<int32_t>(chosen[static_cast<size_t>(j)]);
        weights.data_as<float>()[t * k + j] = static_cast<float>(w[static_cast<size_t>(j)] * o.scaling);
      }
    }
  });
}

void moe_route_backward(Context& ctx, const Tensor& dlogits, const Tensor& dweights, const Tensor& logits,
                        const Tensor& indices, const ops::RouterOptions& o) {
  const int64_t rows = logits.rows(), experts = logits.cols(), k = o.topk;
  check_router(logits, dlogits, experts, DType::kFloat32, "logit gradient");
  check_router(logits, dweights, k, DType::kFloat32, "weight gradient");
  check_router(logits, indices, k, DType::kInt32, "indices");
  const float* in = logits.data_as<float>();
  parallel_for(ctx, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const int32_t* idx = indices.data_as<int32_t>() + t * k;
      const float* dw = dweights.data_as<float>() + t * k;
      std::vector<double> v = row_of(in, t, experts), grad(static_cast<size_t>(experts), 0.0);
      std::vector<double> dp(static_cast<size_t>(k));
      for (int64_t j = 0; j < k; ++j) dp[static_cast<size_t>(j)] = double{dw[j]} * o.scaling;
      if (o.sigmoid) {
        std::vector<double> s(static_cast<size_t>(k));
        for (int64_t j = 0; j < k; ++j) s[static_cast<size_t>(j)] = sigmoid(v[static_cast<size_t>(idx[j])]);
        std::vector<double> ds = dp;
        if (k > 1) {  // p_j = s_j / (S + eps)
          const double z = std::accumulate(s.begin(), s.end(), 0.0) + 1e-20;
          double dot = 0.0;
          for (int64_t j = 0; j < k; ++j) dot += dp[static_cast<size_t>(j)] * s[static_cast<size_t>(j)];
          for (int64_t j = 0; j < k; ++j) ds[static_cast<size_t>(j)] = dp[static_cast<size_t>(j)] / z - dot / (z * z);
        }
        for (int64_t j = 0; j < k; ++j) {
          const double sj = s[static_cast<size_t>(j)];
          grad[static_cast<size_t>(idx[j])] += ds[static_cast<size_t>(j)] * sj * (1.0 - sj);
        }
      } else if (o.pre_softmax) {  // p_j = softmax(v)[idx_j]
        softmax(v);
        std::vector<double> ds(static_cast<size_t>(experts), 0.0);
        for (int64_t j = 0; j < k; ++j) ds[static_cast<size_t>(idx[j])] += dp[static_cast<size_t>(j)];
        double dot = 0.0;
        for (int64_t e = 0; e < experts; ++e) dot += v[static_cast<size_t>(e)] * ds[static_cast<size_t>(e)];
        for (int64_t e = 0; e < experts; ++e) grad[static_cast<size_t>(e)] = v[static_cast<size_t>(e)] * (ds[static_cast<size_t>(e)] - dot);
      } else {  // p = softmax over the selected logits
        std::vector<double> q(static_cast<size_t>(k));
        for (int64_t j = 0; j < k; ++j) q[static_cast<size_t>(j)] = v[static_cast<size_t>(idx[j])];
        softmax(q);
        double dot = 0.0;
        for (int64_t j = 0; j < k; ++j) dot += q[static_cast<size_t>(j)] * dp[static_cast<size_t>(j)];
        for (int64_t j = 0; j < k; ++j) grad[static_cast<size_t>(idx[j])] += q[static_cast<size_t>(j)] * (dp[static_cast<size_t>(j)] - dot);
      }
      for (int64_t e = 0; e < experts; ++e) dlogits.data_as<float>()[t * experts + e] = static_cast<float>(grad[static_cast<size_t>(e)]);
    }
  });
}

void moe_sinkhorn_route(Context& ctx, const Tensor& indices, const Tensor& weights, const Tensor& balanced,
                        const Tensor& logits, int64_t segments) {
  const int64_t rows = logits.rows(), experts = logits.cols(), k = indices.cols();
  GPT_CHECK(logits.dtype() == DType::kFloat32) << "router logits " << logits.to_string();
  check_router(logits, indices, k, DType::kInt32, "indices");
  check_router(logits, weights, k, DType::kFloat32, "weights");
  check_router(logits, balanced, experts, DType::kFloat32, "sinkhorn scores");
  GPT_CHECK(k >= 1 && k <= experts && segments >= 1 && rows % segments == 0)
      << "sinkhorn top-" << k << " of " << experts << " experts over " << rows << " rows in " << segments << " runs";
  const int64_t run = rows / segments;
  const float* in = logits.data_as<float>();
  for (int64_t s = 0; s < segments && run > 0; ++s) {
    // Megatron's moe_utils.sinkhorn on rows [s run, (s + 1) run), in double.
    const float* first = in + s * run * experts;
    std::vector<double> cost(static_cast<size_t>(run * experts));
    for (size_t i = 0; i < cost.size(); ++i) cost[i] = std::exp(double{first[i]});
    std::vector<double> d0(static_cast<size_t>(run), 1.0), d1(static_cast<size_t>(experts), 1.0), previous = d1;
    double error = 1e9;
    for (int round = 0; error > ops::kSinkhornTolerance && round < ops::kSinkhornMaxRounds; ++round) {
      previous = d1;
      for (int64_t t = 0; t < run; ++t) {
        double sum = 0.0;
        for (int64_t e = 0; e < experts; ++e) sum += d1[static_cast<size_t>(e)] * cost[static_cast<size_t>(t * experts + e)];
        d0[static_cast<size_t>(t)] = (1.0 / static_cast<double>(run)) * (1.0 / (sum + ops::kSinkhornEpsilon));
      }
      std::vector<double> columns(static_cast<size_t>(experts), 0.0);
      for (int64_t t = 0; t < run; ++t) {
        for (int64_t e = 0; e < experts; ++e) columns[static_cast<size_t>(e)] += d0[static_cast<size_t>(t)] * cost[static_cast<size_t>(t * experts + e)];
      }
      error = 0.0;
      for (int64_t e = 0; e < experts; ++e) {
        const auto i = static_cast<size_t>(e);
        d1[i] = (1.0 / static_cast<double>(experts)) * (1.0 / (columns[i] + ops::kSinkhornEpsilon));
        error += std::abs(previous[i] - d1[i]);
      }
      error /= static_cast<double>(experts);
    }
    for (int64_t t = 0; t < run; ++t) {
      const int64_t row = s * run + t;
      std::vector<double> n(static_cast<size_t>(experts));
      for (int64_t e = 0; e < experts; ++e) {
        const auto i = static_cast<size_t>(e);
        n[i] = d1[i] * cost[static_cast<size_t>(t * experts + e)] * d0[static_cast<size_t>(t)];
        balanced.data_as<float>()[row * experts + e] = static_cast<float>(n[i]);
      }
      // The weights: the activation of the logits (sigmoid for k = 1, else softmax over all E).
      std::vector<double> act = row_of(in, row, experts);
      if (k == 1) {
        for (double& x : act) x = sigmoid(x);
      } else {
        softmax(act);
      }
      const std::vector<int64_t> chosen = top_indices(n, k, {});
      for (int64_t j = 0; j < k; ++j) {
        indices.data_as<int32_t>()[row * k + j] = static_cast<int32_t>(chosen[static_cast<size_t>(j)]);
        weights.data_as<float>()[row * k + j] = static_cast<float>(act[static_cast<size_t>(chosen[static_cast<size_t>(j)])]);
      }
    }
  }
}

void moe_aux_statistics(Context& ctx, const Tensor& score_sums, const Tensor& counts, const Tensor& logits,
                        int64_t topk, bool use_sigmoid) {
  const int64_t rows = logits.rows(), experts = logits.cols(), groups = score_sums.rows();
  GPT_CHECK(score_sums.dtype() == DType::kFloat32 && score_sums.cols() == experts && counts.dtype() == DType::kFloat32 &&
            counts.rows() == groups && counts.cols() == experts && groups >= 1 && rows % groups == 0)
      << "MoE statistics " << score_sums.to_string() << " " << counts.to_string() << " for " << logits.to_string();
  // Serial over rows: the sums are accumulated in row order (the reference's order).
  std::vector<double> sums(static_cast<size_t>(groups * experts), 0.0), count(sums.size(), 0.0);
  for (int64_t t = 0; t < rows; ++t) {
    const std::vector<double> s = aux_scores(row_of(logits.data_as<float>(), t, experts), use_sigmoid);
    const int64_t g = t % groups;
    for (int64_t e = 0; e < experts; ++e) sums[static_cast<size_t>(g * experts + e)] += s[static_cast<size_t>(e)];
    for (int64_t e : top_indices(s, topk, {})) count[static_cast<size_t>(g * experts + e)] += 1.0;
  }
  for (size_t i = 0; i < sums.size(); ++i) {
    score_sums.data_as<float>()[i] = static_cast<float>(sums[i]);
    counts.data_as<float>()[i] = static_cast<float>(count[i]);
  }
}

void moe_aux_backward(Context& ctx, const Tensor& dlogits, const Tensor& logits, const Tensor& coefficients,
                      bool use_sigmoid) {
  const int64_t rows = logits.rows(), experts = logits.cols(), groups = coefficients.rows();
  check_router(logits, dlogits, experts, DType::kFloat32, "logit gradient");
  GPT_CHECK(coefficients.dtype() == DType::kFloat32 && coefficients.cols() == experts && rows % groups == 0)
      << "MoE loss coefficients " << coefficients.to_string();
  parallel_for(ctx, rows, 64, [&](int64_t begin, int64_t end) {
    for (int64_t t = begin; t < end; ++t) {
      const std::vector<double> v = row_of(logits.data_as<float>(), t, experts);
      const float* c = coefficients.data_as<float>() + (t % groups) * experts;
      float* out = dlogits.data_as<float>() + t * experts;
      if (!use_sigmoid) {  // d softmax: s (c - <s, c>)
        const std::vector<double> s = aux_scores(v, false);
        double dot = 0.0;
        for (int64_t e = 0; e < experts; ++e) dot += s[static_cast<size_t>(e)] * c[e];
        for (int64_t e = 0; e < experts; ++e) out[e] += static_cast<float>(s[static_cast<size_t>(e)] * (c[e] - dot));
        continue;
      }
      // s_e = sig_e / Z, Z = sum sig + eps: d sig_e = c_e / Z - <c, sig> / Z^2; d v = d sig sig (1 - sig).
      std::vector<double> sig(v.size());
      double z = 1e-20, dot = 0.0;
      for (int64_t e = 0; e < experts; ++e) z += (sig[static_cast<size_t>(e)] = sigmoid(v[static_cast<size_t>(e)]));
      for (int64_t e = 0; e < experts; ++e) dot += c[e] * sig[static_cast<size_t>(e)];
      for (int64_t e = 0; e < experts; ++e) {
        const double s = sig[static_cast<size_t>(e)];
        out[e] += static_cast<float>((c[e] / z - dot / (z * z)) * s * (1.0 - s));
      }
    }
  });
}

void moe_logsumexp(Context& ctx, const Tensor& lse, const Tensor& logits) {
  const int64_t rows = logits.rows(), experts = logits.cols();
  GPT_CHECK(lse.dtype() == DType::kFloat32 && lse.numel() == rows) << "MoE logsumexp " << lse.to_string();
  for (int64_t t = 0; t < rows; ++t) {
    const std::vector<double> v = row_of(logits.data_as<float>(), t, experts);
    const double top = *std::max_element(v.begin(), v.end());
    double sum = 0.0;
    for (double x : v) sum += std::exp(x - top);
    lse.data_as<float>()[t] = static_cast<float>(top + std::log(sum));
  }
}

void moe_z_loss_backward(Context& ctx, const Tensor& dlogits, const Tensor& logits, const Tensor& lse, float scale) {
  const int64_t rows = logits.rows(), experts = logits.cols();
  check_router(logits, dlogits, experts, DType::kFloat32, "logit gradient");
  GPT_CHECK(lse.dtype() == DType::kFloat32 && lse.numel() == rows) << "MoE logsumexp " << lse.to_string();
  for (int64_t t = 0; t < rows; ++t) {
    std::vector<double> v = row_of(logits.data_as<float>(), t, experts);
    softmax(v);
    const double factor = double{scale} * lse.data_as<float>()[t];
    for (int64_t e = 0; e < experts; ++e)
      dlogits.data_as<float>()[t * experts + e] += static_cast<float>(factor * v[static_cast<size_t>(e)]);
  }
}

void moe_permute(Context& ctx, const Tensor& out, const Tensor& x, const Tensor& source, const Tensor& row_scale) {
  const int64_t m = out.rows(), h = x.cols();
  GPT_CHECK(out.cols() == h && out.dtype() == x.dtype() && source.dtype() == DType::kInt32 && source.numel() == m &&
            (!row_scale.defined() || (row_scale.dtype() == DType::kFloat32 && row_scale.numel() == m)))
      << "MoE permute " << out.to_string() << " from " << x.to_string() << " by " << source.to_string();
  const int32_t* src = source.data_as<int32_t>();
  const float* scale = optional_data<float>(row_scale);
  dispatch_float_type(x.dtype(), [&](auto tag) {
    using T = decltype(tag);
    // The row pointers hoisted out of the column loop (data_as checks the dtype on every call),
    // so that the loop vectorizes; the same products as element by element.
    const T* in = x.data_as<T>();
    T* o = out.data_as<T>();
    parallel_for(ctx, m, 16, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) {
        GPT_CHECK(src[i] < x.rows()) << "MoE permute source row " << src[i];
        T* to = o + i * h;
        if (src[i] < 0) {
          for (int64_t c = 0; c < h; ++c) store(to, c, 0.0f);
          continue;
        }
        const T* from = in + src[i] * h;
        const float factor = scale ? scale[i] : 1.0f;
        for (int64_t c = 0; c < h; ++c) store(to, c, load(from, c) * factor);
      }
    });
  });
}

void moe_combine(Context& ctx, const Tensor& y, const Tensor& rows, const Tensor& destination, const Tensor& weights) {
  const int64_t tokens = y.rows(), h = y.cols(), k = destination.cols();
  GPT_CHECK(rows.cols() == h && rows.dtype() == y.dtype() && destination.dtype() == DType::kInt32 &&
            destination.rows() == tokens && (!weights.defined() || (weights.dtype() == DType::kFloat32 &&
                                                                    weights.rows() == tokens && weights.cols() == k)))
      << "MoE combine " << y.to_string() << " from " << rows.to_string() << " by " << destination.to_string();
  const int32_t* dest = destination.data_as<int32_t>();
  const float* w = optional_data<float>(weights);
  dispatch_float_type(y.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* in = rows.data_as<T>();
    T* out = y.data_as<T>();
    parallel_for(ctx, tokens, 16, [&](int64_t begin, int64_t end) {
      std::vector<float> acc(static_cast<size_t>(h));
      float* a = acc.data();
      for (int64_t t = begin; t < end; ++t) {
        std::fill(acc.begin(), acc.end(), 0.0f);
        for (int64_t j = 0; j < k; ++j) {
          const int32_t r = dest[t * k + j];
          if (r < 0) continue;
          GPT_CHECK(r < rows.rows()) << "MoE combine row " << r;
          const float scale = w ? w[t * k + j] : 1.0f;
          const T* from = in + int64_t{r} * h;
          for (int64_t c = 0; c < h; ++c) a[c] += scale * load(from, c);
        }
        for (int64_t c = 0; c < h; ++c) store(out + t * h, c, a[c]);
      }
    });
  });
}

void moe_combine_weight_grad(Context& ctx, const Tensor& dweights, const Tensor& dy, const Tensor& rows,
                             const Tensor& destination) {
  const int64_t tokens = dy.rows(), h = dy.cols(), k = destination.cols();
  GPT_CHECK(dweights.dtype() == DType::kFloat32 && dweights.rows() == tokens && dweights.cols() == k &&
            rows.cols() == h && rows.dtype() == dy.dtype() && destination.dtype() == DType::kInt32 &&
            destination.rows() == tokens)
      << "MoE combine weight gradient " << dweights.to_string() << " by " << destination.to_string();
  const int32_t* dest = destination.data_as<int32_t>();
  dispatch_float_type(dy.dtype(), [&](auto tag) {
    using T = decltype(tag);
    const T* grad = dy.data_as<T>();
    const T* in = rows.data_as<T>();
    float* out = dweights.data_as<float>();
    parallel_for(ctx, tokens, 16, [&](int64_t begin, int64_t end) {
      for (int64_t t = begin; t < end; ++t) {
        for (int64_t j = 0; j < k; ++j) {
          const int32_t r = dest[t * k + j];
          float dot = 0.0f;
          GPT_CHECK(r < rows.rows()) << "MoE combine weight gradient row " << r;
          if (r >= 0) {
            const T* g = grad + t * h;
            const T* from = in + int64_t{r} * h;
            for (int64_t c = 0; c < h; ++c) dot += load(g, c) * load(from, c);  // in order: the same sum
          }
          out[t * k + j] = dot;
        }
      }
    });
  });
}

}  // namespace gpt::cpu
