#include "model/expert_dispatch.h"

#include <algorithm>

#include "core/check.h"

namespace gpt {
namespace {

struct Pair {
  int32_t token;
  int32_t slot;  // j of the token's top-k, or -1 for an unrouted padding token
  float weight;
};

// The pairs an expert keeps among `candidates` (its routed pairs of one run, in token order):
// all, or `capacity` of them by the policy, back in token order.
std::vector<Pair> kept_pairs(std::vector<Pair> candidates, int64_t capacity, TokenDropPolicy policy) {
  if (static_cast<int64_t>(candidates.size()) <= capacity) return candidates;
  if (policy == TokenDropPolicy::kProbs) {
    std::stable_sort(candidates.begin(), candidates.end(),
                     [](const Pair& a, const Pair& b) { return a.weight > b.weight; });
  }
  candidates.resize(static_cast<size_t>(capacity));
  std::sort(candidates.begin(), candidates.end(), [](const Pair& a, const Pair& b) { return a.token < b.token; });
  return candidates;
}

}  // namespace

ExpertDispatch plan_expert_dispatch(std::span<const int32_t> indices, std::span<const float> weights, int64_t tokens,
                                    const MoeConfig& moe, int64_t segments) {
  const int64_t k = moe.topk, experts = moe.num_experts;
  GPT_CHECK(static_cast<int64_t>(indices.size()) == tokens * k && weights.size() == indices.size() &&
            segments >= 1 && tokens % segments == 0)
      << "expert dispatch of " << tokens << " tokens, top-" << k << ", " << segments << " runs";
  // Each expert's routed pairs, in token order.
  std::vector<std::vector<Pair>> routed(static_cast<size_t>(experts));
  for (int64_t t = 0; t < tokens; ++t) {
    for (int64_t j = 0; j < k; ++j) {
      const int32_t e = indices[static_cast<size_t>(t * k + j)];
      GPT_CHECK(e >= 0 && e < experts) << "routed expert " << e;
      routed[static_cast<size_t>(e)].push_back(
          {static_cast<int32_t>(t), static_cast<int32_t>(j), weights[static_cast<size_t>(t * k + j)]});
    }
  }
  ExpertDispatch d;
  d.expert_rows.assign(static_cast<size_t>(experts), 0);
  d.destination.assign(static_cast<size_t>(tokens * k), -1);
  d.weights.assign(static_cast<size_t>(tokens * k), 0.0f);
  const int64_t run = tokens / segments;
  const int64_t capacity = moe.dropless() ? run : moe_capacity(moe, run);
  for (int64_t e = 0; e < experts; ++e) {
    const std::vector<Pair>& pairs = routed[static_cast<size_t>(e)];
    auto next = pairs.begin();
    for (int64_t segment = 0; segment < segments; ++segment) {
      const int64_t end_token = (segment + 1) * run;
      std::vector<Pair> candidates;
      for (; next != pairs.end() && next->token < end_token; ++next) candidates.push_back(*next);
      std::vector<Pair> kept = moe.dropless() ? candidates : kept_pairs(candidates, capacity, moe.drop_policy);
      if (!moe.dropless() && moe.pad_to_capacity) {
        // Fill up with the run's unrouted tokens, earliest first, then restore token order.
        std::vector<bool> taken(static_cast<size_t>(run), false);
        for (const Pair& p : candidates) taken[static_cast<size_t>(p.token - segment * run)] = true;
        for (int64_t t = 0; t < run && static_cast<int64_t>(kept.size()) < capacity; ++t) {
          if (!taken[static_cast<size_t>(t)]) kept.push_back({static_cast<int32_t>(segment * run + t), -1, 0.0f});
        }
        std::sort(kept.begin(), kept.end(), [](const Pair& a, const Pair& b) { return a.token < b.token; });
      }
      for (const Pair& p : kept) {
        const auto row = static_cast<int32_t>(d.source.size());
        d.source.push_back(p.token);
        d.row_weights.push_back(p.weight);
        if (p.slot >= 0) {
          d.destination[static_cast<size_t>(p.token * k + p.slot)] = row;
          d.weights[static_cast<size_t>(p.token * k + p.slot)] = p.weight;
        }
      }
      d.expert_rows[static_cast<size_t>(e)] += static_cast<int64_t>(kept.size());
    }
  }
  return d;
}

ExpertDispatch plan_local_expert_dispatch(std::span<const int32_t> indices, std::span<const float> weights,
                                          int64_t rows, int64_t k, int64_t first_expert, int64_t local_experts) {
  GPT_CHECK(static_cast<int64_t>(indices.size()) == rows * k && weights.size() == indices.size() && local_experts >= 1)
      << "local expert dispatch of " << rows << " rows, top-" << k << ", " << local_experts << " experts";
  ExpertDispatch d;
  d.expert_rows.assign(static_cast<size_t>(local_experts), 0);
  d.destination.assign(static_cast<size_t>(rows * k), -1);
  d.weights.assign(static_cast<size_t>(rows * k), 0.0f);
  // Count first, then place each pair at its expert's next row (a stable counting sort by expert).
  auto local = [&](size_t pair) -> int64_t {
    const int64_t e = indices[pair];
    return e >= first_expert && e < first_expert + local_experts ? e - first_expert : -1;
  };
  for (size_t pair = 0; pair < indices.size(); ++pair) {
    if (const int64_t e = local(pair); e >= 0) ++d.expert_rows[static_cast<size_t>(e)];
  }
  std::vector<int64_t> next(static_cast<size_t>(local_experts), 0);
  for (int64_t e = 1; e < local_experts; ++e) {
    next[static_cast<size_t>(e)] = next[static_cast<size_t>(e - 1)] + d.expert_rows[static_cast<size_t>(e - 1)];
  }
  const int64_t total = local_experts == 0 ? 0 : next.back() + d.expert_rows.back();
  d.source.assign(static_cast<size_t>(total), 0);
  d.row_weights.assign(static_cast<size_t>(total), 0.0f);
  for (size_t pair = 0; pair < indices.size(); ++pair) {
    const int64_t e = local(pair);
    if (e < 0) continue;
    const int64_t row = next[static_cast<size_t>(e)]++;
    d.source[static_cast<size_t>(row)] = static_cast<int32_t>(static_cast<int64_t>(pair) / k);
    d.row_weights[static_cast<size_t>(row)] = weights[pair];
    d.destination[pair] = static_cast<int32_t>(row);
    d.weights[pair] = weights[pair];
  }
  return d;
}

}  // namespace gpt
