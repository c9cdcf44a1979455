// The shard plan under expert parallelism (model/shard_plan.h, EP-DESIGN.md): a rank holds its EP
// share of the routed experts (holds_param), sliced over the expert tensor-parallel group; with the
// expert groups apart from the dense ones the experts' buckets hold experts only, come after every
// dense bucket, are padded to lcm(EDP, 128) and sharded over EDP, while the dense part of the plan
// is exactly the plan of the dense parameters alone. Over every rank of a world TP x DP = ETP x EP x
// EDP, the owned ranges' rectangles cover every element of every global tensor exactly once,
// each checked against an element-by-element mapping of the split written here. With EP = 1 and
// ETP = TP the plan is the one without expert settings.
#include <map>
#include <numeric>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/shard_plan.h"
#include "support/tiny_model.h"

namespace gpt {
namespace {

ModelConfig moe_model(bool llama) {
  ModelConfig c = testing_support::tiny_model(2, 6, /*pad_tp=*/4);
  if (llama) c = testing_support::llama_style(c, /*query_groups=*/4);
  c.moe.num_experts = 4;
  c.moe.topk = 2;
  c.moe.ffn_hidden_size = 12;
  c.moe.moe_layers = {true, false};
  if (llama) c.moe.shared_expert_size = 8;
  return c;
}

// Local element (r, c) of a slice over `size` ranks -> its global (row, column), from the split
// rules alone (param_registry.h).
std::pair<int64_t, int64_t> global_of(const ParamSpec& spec, int rank, int size, int64_t r, int64_t c) {
  const int64_t rows = spec.global_shape[0];
  const int64_t cols = spec.global_shape.size() == 2 ? spec.global_shape[1] : 1;
  switch (spec.split) {
    case TensorSplit::kReplicated: return {r, c};
    case TensorSplit::kRows: return {rank * (rows / size) + r, c};
    case TensorSplit::kColumns: return {r, rank * (cols / size) + c};
    case TensorSplit::kGatedRows: {
      const int64_t half = rows / (2 * size);
      return {r < half ? rank * half + r : rows / 2 + rank * half + (r - half), c};
    }
  }
  return {-1, -1};
}

// A world of TP x DP ranks (one stage, CP = 1), seen by the dense grid (tp fastest) and by the
// expert grid (etp fastest, then ep, then edp): rank = tp + TP dp = etp + ETP (ep + EP edp).
struct Layout {
  int tp, dp, ep, etp;
  bool distributed;
  int64_t bucket_size;
  int world() const { return tp * dp; }
  int edp() const { return world() / (etp * ep); }
};

std::string describe(const Layout& l) {
  return "tp" + std::to_string(l.tp) + " dp" + std::to_string(l.dp) + " ep" + std::to_string(l.ep) + " etp" +
         std::to_string(l.etp) + (l.distributed ? " distributed" : "") + " bucket " + std::to_string(l.bucket_size);
}

ShardPlanConfig config_of(const Layout& l, int rank) {
  const int etp = rank % l.etp, edp = rank / (l.etp * l.ep);
  return {.tensor_parallel_rank = rank % l.tp,
          .tensor_parallel_size = l.tp,
          .data_parallel_rank = rank / l.tp,
          .data_parallel_size = l.dp,
          .distributed_optimizer = l.distributed,
          .bucket_size = l.bucket_size,
          .own_bucket = {kWordEmbeddingName},
          .expert_tensor_parallel_rank = etp,
          .expert_tensor_parallel_size = l.etp,
          .separate_experts = l.ep > 1 || l.etp != l.tp,
          .expert_data_parallel_rank = edp,
          .expert_data_parallel_size = l.edp()};
}

std::vector<ParamSpec> rank_specs(const std::vector<ParamSpec>& all, const Layout& l, int rank) {
  const ExpertShare share{(rank / l.etp) % l.ep, l.ep};
  std::vector<ParamSpec> mine;
  for (const ParamSpec& spec : all) {
    if (holds_param(spec, routed_experts(all), share)) mine.push_back(spec);
  }
  return mine;
}

TEST(ExpertShardPlan, LocalExperts) {
  const std::vector<ParamSpec> all = build_param_specs(moe_model(false));
  EXPECT_EQ(routed_experts(all), 4);
  for (int ep : {1, 2, 4}) {
    for (int rank = 0; rank < ep; ++rank) {
      std::map<int64_t, int> experts;  // expert -> its parameters held
      for (const ParamSpec& spec : all) {
        if (spec.expert >= 0 && holds_param(spec, 4, {rank, ep})) ++experts[spec.expert];
        if (spec.expert < 0) EXPECT_TRUE(holds_param(spec, 4, {rank, ep})) << spec.name;
      }
      std::map<int64_t, int> expected;
      for (int64_t e = rank * 4 / ep; e < (rank + 1) * 4 / ep; ++e) expected[e] = 4;  // fc1/fc2 weight and bias
      EXPECT_EQ(experts, expected) << "ep " << ep << " rank " << rank;
    }
  }
  // The expert index names the parameter's global expert, and nothing else is an expert.
  for (const ParamSpec& spec : all) {
    const bool routed = spec.name.find(".mlp.experts.") != std::string::npos;
    EXPECT_EQ(spec.expert >= 0, routed) << spec.name;
    if (routed) EXPECT_EQ(spec.name.back() - '0', spec.expert) << spec.name;
  }
}

// With EP = 1 and ETP = TP (the expert groups the dense ones) the expert settings change nothing.
TEST(ExpertShardPlan, FoldedLayoutIsThePlanWithoutExperts) {
  for (bool llama : {false, true}) {
    const std::vector<ParamSpec> all = build_param_specs(moe_model(llama));
    for (const Layout l : {Layout{2, 2, 1, 2, true, 0}, Layout{2, 2, 1, 2, true, 300}, Layout{1, 4, 1, 1, true, 300}}) {
      for (int rank = 0; rank < l.world(); ++rank) {
        ShardPlanConfig plain = config_of(l, rank);
        ASSERT_FALSE(plain.separate_experts);
        const ShardPlan with(all, plain);
        plain.expert_tensor_parallel_size = 0;
        plain.expert_data_parallel_rank = 0;
        plain.expert_data_parallel_size = 1;
        const ShardPlan without(all, plain);
        EXPECT_EQ(with.flat_elements(), without.flat_elements());
        EXPECT_EQ(with.bucket_shards(), without.bucket_shards());
        EXPECT_EQ(with.owned(), without.owned());
        for (size_t i = 0; i < with.params().size(); ++i) {
          EXPECT_EQ(with.params()[i].flat_offset, without.params()[i].flat_offset);
          EXPECT_EQ(with.params()[i].counts_in_grad_norm, without.params()[i].counts_in_grad_norm);
          EXPECT_EQ(with.params()[i].domain, ParamDomain::kDense);
        }
        EXPECT_FALSE(with.has_expert_domain());
      }
    }
  }
}

// Checks one rank's plan: domains never mixed, expert buckets last and padded for EDP, the dense
// part the plan of the dense parameters alone; counts each counted owned element into `owners`.
void check_rank(const Layout& l, int rank, const std::vector<ParamSpec>& all,
                std::map<std::string, std::vector<int>>& owners) {
  const ShardPlanConfig config = config_of(l, rank);
  const std::vector<ParamSpec> specs = rank_specs(all, l, rank);
  const ShardPlan plan(specs, config);
  const bool apart = config.separate_experts;
  EXPECT_EQ(plan.has_expert_domain(), apart);
  bool expert_seen = false;
  int64_t next = 0;
  for (size_t b = 0; b < plan.buckets().size(); ++b) {
    const BucketPlan& bucket = plan.buckets()[b];
    EXPECT_EQ(bucket.range.begin, next);
    next = bucket.range.end;
    for (size_t i : bucket.params) {
      const ParamPlacement& p = plan.params()[i];
      EXPECT_EQ(p.domain, bucket.domain) << p.spec->name;
      EXPECT_EQ(p.domain == ParamDomain::kExpert, apart && p.spec->expert >= 0) << p.spec->name;
    }
    if (bucket.domain == ParamDomain::kExpert) expert_seen = true;
    EXPECT_FALSE(expert_seen && bucket.domain == ParamDomain::kDense) << "a dense bucket after an expert one";
    const int group = bucket.domain == ParamDomain::kExpert ? l.edp() : l.dp;
    EXPECT_EQ(plan.bucket_group(static_cast<int>(b)).size, group);
    if (l.distributed && group > 1) EXPECT_EQ(bucket.range.size() % std::lcm(group, 128), 0);
  }
  EXPECT_EQ(next, plan.flat_elements());
  if (apart) {
    // The dense part: the plan of the dense parameters alone, element for element.
    std::vector<ParamSpec> dense;
    for (const ParamSpec& spec : specs) {
      if (spec.expert < 0) dense.push_back(spec);
    }
    const ShardPlan alone(dense, config);
    for (size_t i = 0; i < alone.params().size(); ++i) {
      EXPECT_EQ(plan.params()[i].spec->name, alone.params()[i].spec->name);
      EXPECT_EQ(plan.params()[i].flat_offset, alone.params()[i].flat_offset);
    }
    const std::vector<BucketShard> shards = plan.bucket_shards(), dense_shards = alone.bucket_shards();
    for (size_t b = 0; b < dense_shards.size(); ++b) EXPECT_EQ(shards[b], dense_shards[b]);
  }
  // Coverage of the counted replicas through the rectangles, each element checked.
  for (const Range& owned : plan.owned()) {
    for (const ParamPlacement& p : plan.params()) {
      const Range mine = p.range().intersect(owned);
      if (mine.empty()) continue;
      const bool expert = p.spec->expert >= 0;
      const int split_rank = expert ? config.expert_tensor_parallel_rank : config.tensor_parallel_rank;
      const int split_size = expert ? l.etp : l.tp;
      const int replica = expert ? config.expert_data_parallel_rank : config.data_parallel_rank;
      const int64_t cols = p.spec->global_shape.size() == 2 ? p.spec->global_shape[1] : 1;
      const int64_t local_cols = p.slice.local_shape.rank() == 2 ? p.slice.local_shape[1] : 1;
      for (const GlobalRectangle& rect : plan.global_rectangles(p, mine)) {
        const int64_t rect_cols = rect.counts.size() == 2 ? rect.counts[1] : 1;
        for (int64_t k = 0; k < rect.numel(); ++k) {
          const int64_t row = rect.offsets[0] + k / rect_cols;
          const int64_t col = (rect.offsets.size() == 2 ? rect.offsets[1] : 0) + k % rect_cols;
          const int64_t local = rect.flat_begin + k - p.flat_offset;
          ASSERT_EQ(std::make_pair(row, col),
                    global_of(*p.spec, split_rank, split_size, local / local_cols, local % local_cols))
              << p.spec->name;
          if (p.counts_in_grad_norm && (l.distributed || replica == 0)) {
            ++owners[p.spec->name][static_cast<size_t>(row * cols + col)];
          }
        }
      }
    }
  }
}

TEST(ExpertShardPlan, EveryElementOnceOverTheWorld) {
  std::vector<Layout> layouts;
  for (bool distributed : {false, true}) {
    for (int64_t bucket : {int64_t{0}, int64_t{300}}) {
      layouts.push_back({1, 4, 2, 1, distributed, bucket});  // EP2, EDP2 under DP4
      layouts.push_back({1, 4, 4, 1, distributed, bucket});  // EP4, EDP1
      layouts.push_back({2, 2, 2, 1, distributed, bucket});  // TP2 with ETP1 x EP2: EDP2
      layouts.push_back({2, 2, 2, 2, distributed, bucket});  // ETP2 x EP2: EDP1
      layouts.push_back({2, 2, 1, 1, distributed, bucket});  // ETP1 under TP2, EP1: EDP4
      layouts.push_back({1, 4, 1, 2, distributed, bucket});  // ETP2 under TP1: EDP2
      layouts.push_back({2, 4, 2, 1, distributed, bucket});  // world 8: EDP4 x EP2
    }
  }
  for (bool llama : {false, true}) {
    const std::vector<ParamSpec> all = build_param_specs(moe_model(llama));
    for (const Layout& l : layouts) {
      SCOPED_TRACE(describe(l) + (llama ? " llama" : " gpt"));
      std::map<std::string, std::vector<int>> owners;
      for (const ParamSpec& spec : all) owners[spec.name].assign(static_cast<size_t>(spec.global_numel()), 0);
      for (int rank = 0; rank < l.world(); ++rank) check_rank(l, rank, all, owners);
      for (const auto& [name, counts] : owners) {
        for (size_t i = 0; i < counts.size(); ++i) {
          ASSERT_EQ(counts[i], 1) << name << " global element " << i;
        }
      }
    }
  }
}

// Expert shards over EDP: the EDP ranks' shards of each expert bucket partition it, in rank order.
TEST(ExpertShardPlan, ExpertBucketsShardOverExpertDataParallel) {
  const std::vector<ParamSpec> all = build_param_specs(moe_model(true));
  const Layout l{2, 4, 2, 1, true, 0};  // world 8: DP4 (dense), EDP4 x EP2 x ETP1 (experts)
  for (int ep = 0; ep < l.ep; ++ep) {
    std::vector<std::vector<BucketShard>> by_edp;
    for (int edp = 0; edp < l.edp(); ++edp) {
      const int rank = l.etp * (ep + l.ep * edp);
      const ShardPlan plan(rank_specs(all, l, rank), config_of(l, rank));
      by_edp.push_back(plan.bucket_shards());
      for (size_t b = 0; b < plan.buckets().size(); ++b) {
        if (plan.buckets()[b].domain != ParamDomain::kExpert) continue;
        const Range bucket = plan.buckets()[b].range;
        const int64_t part = bucket.size() / l.edp();
        EXPECT_EQ(by_edp.back()[b].shard, (Range{bucket.begin + edp * part, bucket.begin + (edp + 1) * part}));
        // Whole experts, not TP slices: ETP is 1 though TP is 2.
        for (size_t i : plan.buckets()[b].params) {
          EXPECT_EQ(plan.params()[i].numel(), plan.params()[i].spec->global_numel());
        }
      }
    }
    for (size_t e = 1; e < by_edp.size(); ++e) EXPECT_EQ(by_edp[e].size(), by_edp[0].size());
  }
}

}  // namespace
}  // namespace gpt
