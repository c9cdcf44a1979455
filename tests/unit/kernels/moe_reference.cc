#include "unit/kernels/moe_reference.h"

#include <cmath>
#include <limits>

namespace gpt::reference::moe {

std::vector<int64_t> top_k(const Vec& v, int64_t k, const std::vector<bool>& allowed) {
  std::vector<bool> taken(v.size(), false);
  std::vector<int64_t> chosen;
  for (int64_t j = 0; j < k; ++j) {
    int64_t best = -1;
    for (size_t e = 0; e < v.size(); ++e) {
      if (taken[e] || (!allowed.empty() && !allowed[e])) continue;
      if (best < 0 || v[e] > v[static_cast<size_t>(best)]) best = static_cast<int64_t>(e);
    }
    if (best < 0) break;
    taken[static_cast<size_t>(best)] = true;
    chosen.push_back(best);
  }
  return chosen;
}

Vec softmax(const Vec& v) {
  double top = -std::numeric_limits<double>::infinity();
  for (double x : v) top = std::max(top, x);
  Vec out(v.size());
  double sum = 0;
  for (size_t i = 0; i < v.size(); ++i) sum += out[i] = std::exp(v[i] - top);
  for (double& x : out) x /= sum;
  return out;
}

double sigmoid(double x) { return 1.0 / (1.0 + std::exp(-x)); }

double logsumexp(const Vec& v) {
  double top = -std::numeric_limits<double>::infinity();
  for (double x : v) top = std::max(top, x);
  double sum = 0;
  for (double x : v) sum += std::exp(x - top);
  return top + std::log(sum);
}

std::vector<int64_t> route_indices(const Vec& logits, const Vec& bias, const Router& r) {
  const size_t experts = logits.size();
  Vec select(experts);
  const Vec probabilities = softmax(logits);
  for (size_t e = 0; e < experts; ++e) {
    if (r.sigmoid) select[e] = sigmoid(logits[e]) + (bias.empty() ? 0.0 : bias[e]);
    else select[e] = r.pre_softmax ? probabilities[e] : logits[e];
  }
  std::vector<bool> allowed;
  if (r.groups > 0 && r.group_topk > 0) {
    const int64_t size = static_cast<int64_t>(experts) / r.groups, best = r.k / r.group_topk;
    Vec group_score(static_cast<size_t>(r.groups), 0.0);
    for (int64_t g = 0; g < r.groups; ++g) {
      const Vec members(select.begin() + g * size, select.begin() + (g + 1) * size);
      for (int64_t m : top_k(members, best)) group_score[static_cast<size_t>(g)] += members[static_cast<size_t>(m)];
    }
    allowed.assign(experts, false);
    for (int64_t g : top_k(group_score, r.group_topk)) {
      for (int64_t e = g * size; e < (g + 1) * size; ++e) allowed[static_cast<size_t>(e)] = true;
    }
  }
  return top_k(select, r.k, allowed);
}

Vec route_weights(const Vec& logits, const std::vector<int64_t>& indices, const Router& r) {
  Vec w;
  if (r.sigmoid) {
    double sum = 0;
    for (int64_t e : indices) sum += sigmoid(logits[static_cast<size_t>(e)]);
    for (int64_t e : indices) {
      const double s = sigmoid(logits[static_cast<size_t>(e)]);
      w.push_back(indices.size() > 1 ? s / (sum + 1e-20) : s);
    }
  } else if (r.pre_softmax) {
    const Vec p = softmax(logits);
    for (int64_t e : indices) w.push_back(p[static_cast<size_t>(e)]);
  } else {
    Vec selected;
    for (int64_t e : indices) selected.push_back(logits[static_cast<size_t>(e)]);
    w = softmax(selected);
  }
  for (double& x : w) x *= r.scaling;
  return w;
}

Vec aux_scores(const Vec& logits, bool use_sigmoid) {
  if (!use_sigmoid) return softmax(logits);
  Vec s(logits.size());
  double sum = 0;
  for (size_t e = 0; e < s.size(); ++e) sum += s[e] = sigmoid(logits[e]);
  for (double& x : s) x /= sum + 1e-20;
  return s;
}

Vec sinkhorn(const Vec& logits, int64_t rows, int64_t experts) {
  auto at = [experts](int64_t t, int64_t e) { return static_cast<size_t>(t * experts + e); };
  Vec cost(logits.size());
  for (size_t i = 0; i < cost.size(); ++i) cost[i] = std::exp(logits[i]);
  Vec d0(static_cast<size_t>(rows), 1.0), d1(static_cast<size_t>(experts), 1.0), d1_old = d1;
  for (double error = 1e9; error > 1e-4;) {
    for (int64_t t = 0; t < rows; ++t) {  // d0 = (1 / rows) / (cost @ d1 + eps)
      double dot = 0;
      for (int64_t e = 0; e < experts; ++e) dot += cost[at(t, e)] * d1[static_cast<size_t>(e)];
      d0[static_cast<size_t>(t)] = 1.0 / static_cast<double>(rows) / (dot + 1e-8);
    }
    for (int64_t e = 0; e < experts; ++e) {  // d1 = (1 / E) / (d0 @ cost + eps)
      double dot = 0;
      for (int64_t t = 0; t < rows; ++t) dot += d0[static_cast<size_t>(t)] * cost[at(t, e)];
      d1[static_cast<size_t>(e)] = 1.0 / static_cast<double>(experts) / (dot + 1e-8);
    }
    error = 0;
    for (int64_t e = 0; e < experts; ++e) error += std::abs(d1_old[static_cast<size_t>(e)] - d1[static_cast<size_t>(e)]);
    error /= static_cast<double>(experts);
    d1_old = d1;
  }
  Vec out(cost.size());
  for (int64_t t = 0; t < rows; ++t) {
    for (int64_t e = 0; e < experts; ++e) out[at(t, e)] = d1[static_cast<size_t>(e)] * cost[at(t, e)] * d0[static_cast<size_t>(t)];
  }
  return out;
}

Vec combine(const Vec& rows, const std::vector<int32_t>& destination, const Vec& weights, int64_t tokens, int64_t k,
            int64_t h) {
  Vec y(static_cast<size_t>(tokens * h), 0.0);
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t r = destination[static_cast<size_t>(t * k + j)];
      if (r < 0) continue;
      const double w = weights.empty() ? 1.0 : weights[static_cast<size_t>(t * k + j)];
      for (int64_t c = 0; c < h; ++c) y[static_cast<size_t>(t * h + c)] += w * rows[static_cast<size_t>(r * h + c)];
    }
  }
  return y;
}

}  // namespace gpt::reference::moe
