// The distributed optimizer's shards, without MPI: buckets padded so that they split evenly over
// DP ranks, every element owned by exactly one rank, and the optimizer state of one rank a quarter
// of the unsharded one with DP = 4 (within the bucket padding).
#include <vector>

#include "core/arena.h"
#include "gtest/gtest.h"
#include "optim/adamw.h"
#include "parallel/data_parallel/grad_sync.h"
#include "support/place_only_group.h"

namespace gpt {
namespace {

std::vector<ParamSpec> specs() {
  std::vector<ParamSpec> all;
  const std::pair<const char*, std::vector<int64_t>> shapes[] = {
      {"a.weight", {37, 29}}, {"a.bias", {29}}, {"b.weight", {300, 7}}, {"b.bias", {7}}, {"c.weight", {1000}}};
  for (const auto& [name, shape] : shapes) {
    ParamSpec s;
    s.name = name;
    s.global_shape = shape;
    s.weight_decay = shape.size() > 1;
    all.push_back(s);
  }
  return all;
}

TEST(DistributedOptimizer, ShardsCoverEveryBucketOnceAndHoldAQuarterOfTheState) {
  Context ctx = Context::cpu(1);
  Arena arena(Device::kCpu, "zero");
  // DP = 1: one unpadded buffer, the whole state on the rank.
  ParamStore whole(specs(), 0, 1, DType::kBFloat16, arena);
  AdamW unsharded(ctx, whole, {}, arena);
  const int64_t elements = whole.flat_values().numel();
  EXPECT_EQ(unsharded.owned_elements(), elements);

  // DP = 4 with buckets of about 500 elements, each padded to a multiple of lcm(4, 128).
  std::vector<int64_t> owner;
  int64_t owned_total = 0;
  for (int rank = 0; rank < 4; ++rank) {
    const ShardPlanConfig config{.data_parallel_rank = rank,
                                 .data_parallel_size = 4,
                                 .distributed_optimizer = true,
                                 .bucket_size = 500,
                                 .own_bucket = {"b.weight"}};
    ParamStore store(ShardPlan(specs(), config), DType::kBFloat16, arena);
    ASSERT_GE(store.buckets().size(), 3u);
    for (const BucketPlan& bucket : store.buckets()) EXPECT_EQ(bucket.range.size() % 128, 0) << "bucket padding";
    // The tied-embedding rule: a parameter named alone gets a bucket of its own.
    const Param& alone = store.get("b.weight");
    for (const BucketPlan& bucket : store.buckets()) {
      if (!store.range_of(alone).intersect(bucket.range).empty()) EXPECT_EQ(bucket.params.size(), 1u);
    }
    // The plan's shards are what the reduce-scatter leaves on the rank (GradientSync checks it).
    PlaceOnlyGroup group(rank, 4);
    GradientSync sync(group, store.flat_grads(), store.plan().bucket_shards(), GradientReduction::kReduceScatter,
                      arena);
    EXPECT_EQ(sync.shards(), store.plan().owned());
    AdamW sharded(ctx, store, {}, arena, store.plan().owned());
    owner.resize(static_cast<size_t>(store.flat_values().numel()), -1);
    for (const Range& shard : sharded.owned()) {
      for (int64_t i = shard.begin; i < shard.end; ++i) {
        EXPECT_EQ(owner[static_cast<size_t>(i)], -1) << "element " << i << " owned twice";
        owner[static_cast<size_t>(i)] = rank;
      }
    }
    owned_total += sharded.owned_elements();
    EXPECT_EQ(sharded.owned_elements() * 4, store.flat_values().numel());
    // A quarter of the unsharded state, plus at most the padding of each bucket.
    EXPECT_LE(sharded.owned_elements() * 4 - elements, static_cast<int64_t>(store.buckets().size()) * 128);
    EXPECT_EQ(sharded.exp_avg().numel(), sharded.owned_elements());
  }
  for (int64_t who : owner) EXPECT_GE(who, 0) << "an element nobody owns";
  EXPECT_EQ(owned_total, static_cast<int64_t>(owner.size()));
}

}  // namespace
}  // namespace gpt
