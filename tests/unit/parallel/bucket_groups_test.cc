// Buckets reduced and gathered over groups of their own (expert parallelism: the dense buckets over
// the data x context group, the expert buckets over the expert data-parallel group) under mpirun
// -np 4 (TP 2 x DP 2): buckets over the world (4 ranks), the data-parallel group (2), the
// tensor-parallel group (2) and the pipeline group (1 rank), interleaved in one flat buffer.
// GradientSync (all-reduce and reduce-scatter), ParamGather and GradientShards must leave each
// bucket's shard with exactly the sum over its own group's ranks (small integers, exact in FP32),
// each gathered bucket with its own group's shards, and the rest of the buffer untouched.
#include <map>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "gtest/gtest.h"
#include "parallel/data_parallel/grad_shards.h"
#include "parallel/data_parallel/grad_sync.h"
#include "parallel/data_parallel/param_gather.h"
#include "test_grid.h"

namespace gpt {
namespace {

ProcessGrid& grid() {
  static std::unique_ptr<ProcessGrid> instance = build_test_grid(GridShape{2, 1, 2}, /*timeout_seconds=*/120.0);
  return *instance;
}

Context& ctx() {
  static Context context = Context::cpu(1);
  return context;
}

// What world rank r holds at flat element i: a small integer.
float value(int r, int64_t i) { return static_cast<float>((r + 1) * 3 + static_cast<int>(i % 5) - 4); }

// The world ranks of `group` (all-gathered once per test).
std::vector<int> members(Communicator& group) {
  Arena arena(Device::kCpu, "members");
  const Tensor mine = arena.allocate(DType::kFloat32, {1});
  const Tensor all = arena.allocate(DType::kFloat32, {group.size()});
  mine.data_as<float>()[0] = static_cast<float>(grid().world_rank());
  group.all_gather(ctx(), all, mine);
  std::vector<int> ranks;
  for (int i = 0; i < group.size(); ++i) ranks.push_back(static_cast<int>(all.data_as<float>()[i]));
  return ranks;
}

struct Layout {
  BucketGroups groups;
  std::vector<BucketShard> buckets;
  int64_t elements = 0;
};

// Buckets of 3 x 128 x (group size) elements, each over its group, sharded when `sharded`.
Layout layout(bool sharded) {
  Layout l;
  l.groups = {&grid().world(), &grid().data(), &grid().pipeline(), &grid().tensor(), &grid().world()};
  for (Communicator* group : l.groups) {
    const int64_t part = 3 * 128, size = part * group->size();
    const Range bucket{l.elements, l.elements + size};
    const Range shard = sharded ? Range{bucket.begin + group->rank() * part, bucket.begin + (group->rank() + 1) * part}
                                : bucket;
    l.buckets.push_back({bucket, shard});
    l.elements += size;
  }
  return l;
}

TEST(BucketGroups, GradientSyncSumsEachBucketOverItsGroup) {
  for (GradientReduction reduction : {GradientReduction::kAllReduce, GradientReduction::kReduceScatter}) {
    const bool sharded = reduction == GradientReduction::kReduceScatter;
    const Layout l = layout(sharded);
    Arena arena(Device::kCpu, "sync");
    const Tensor grads = arena.allocate(DType::kFloat32, {l.elements});
    for (int64_t i = 0; i < l.elements; ++i) grads.data_as<float>()[i] = value(grid().world_rank(), i);
    GradientSync sync(l.groups, grads, l.buckets, reduction, arena);
    EXPECT_EQ(GradientSync::buffer_bytes(l.buckets, group_sizes(l.groups), reduction),
              static_cast<int64_t>(arena.used_bytes()) - Arena::aligned_bytes(DType::kFloat32, Shape{l.elements}));
    sync.start(ctx(), 3);
    sync.finish(ctx());
    for (size_t b = 0; b < l.buckets.size(); ++b) {
      const std::vector<int> ranks = members(*l.groups[b]);
      for (int64_t i = l.buckets[b].bucket.begin; i < l.buckets[b].bucket.end; ++i) {
        float expected = value(grid().world_rank(), i);  // outside the shard: this rank's own
        if (i >= l.buckets[b].shard.begin && i < l.buckets[b].shard.end) {
          expected = 0.0f;
          for (int r : ranks) expected += value(r, i);
        }
        ASSERT_EQ(grads.data_as<float>()[i], expected) << "bucket " << b << " element " << i;
      }
    }
  }
}

TEST(BucketGroups, ParamGatherGathersEachBucketOverItsGroup) {
  const Layout l = layout(/*sharded=*/true);
  Arena arena(Device::kCpu, "gather");
  const Tensor values = arena.allocate(DType::kFloat32, {l.elements});
  for (int64_t i = 0; i < l.elements; ++i) values.data_as<float>()[i] = -1.0f;
  for (const BucketShard& b : l.buckets) {
    for (int64_t i = b.shard.begin; i < b.shard.end; ++i) values.data_as<float>()[i] = value(grid().world_rank(), i);
  }
  ParamGather gather(l.groups, values, l.buckets, arena);
  EXPECT_TRUE(gather.gathers());
  EXPECT_EQ(ParamGather::buffer_bytes(l.buckets, group_sizes(l.groups), DType::kFloat32),
            static_cast<int64_t>(arena.used_bytes()) - Arena::aligned_bytes(DType::kFloat32, Shape{l.elements}));
  gather.start(ctx());
  gather.wait_for(ctx(), 2);  // the one-rank bucket: nothing in flight
  gather.wait_all(ctx());
  for (size_t b = 0; b < l.buckets.size(); ++b) {
    const std::vector<int> ranks = members(*l.groups[b]);
    const int64_t part = l.buckets[b].shard.size();
    for (int64_t i = l.buckets[b].bucket.begin; i < l.buckets[b].bucket.end; ++i) {
      const int owner = ranks[static_cast<size_t>((i - l.buckets[b].bucket.begin) / part)];
      ASSERT_EQ(values.data_as<float>()[i], value(owner, i)) << "bucket " << b << " element " << i;
    }
  }
}

TEST(BucketGroups, GradientShardsSumEachBucketOverItsGroup) {
  const Layout l = layout(/*sharded=*/true);
  int64_t shard_elements = 0;
  for (const BucketShard& b : l.buckets) shard_elements += b.shard.size();
  Arena arena(Device::kCpu, "shards");
  const Tensor shards = arena.allocate_zeroed(DType::kFloat32, {shard_elements});
  std::map<int, Tensor> views;
  GradientShards grads(l.groups, shards, l.buckets, /*buffers=*/2, /*overlap=*/true,
                       [&](int bucket, const Tensor& buffer) {
                         if (buffer.defined()) {
                           views[bucket] = buffer;
                         } else {
                           views.erase(bucket);
                         }
                       },
                       arena);
  for (int b = static_cast<int>(l.buckets.size()) - 1; b >= 0; --b) {
    grads.take(ctx(), b);
    const Range& range = l.buckets[static_cast<size_t>(b)].bucket;
    for (int64_t i = range.begin; i < range.end; ++i) {
      views[b].data_as<float>()[i - range.begin] += value(grid().world_rank(), i);
    }
    grads.done(ctx(), b, /*last_writer=*/true);
    grads.progress();
  }
  grads.finish(ctx());
  int64_t offset = 0;
  for (size_t b = 0; b < l.buckets.size(); ++b) {
    const std::vector<int> ranks = members(*l.groups[b]);
    const BucketShard& part = l.buckets[b];
    for (int64_t i = part.shard.begin; i < part.shard.end; ++i) {
      float expected = 0.0f;
      for (int r : ranks) expected += value(r, i);
      ASSERT_EQ(shards.data_as<float>()[offset + (i - part.shard.begin)], expected)
          << "bucket " << b << " element " << i;
    }
    offset += part.shard.size();
  }
}

}  // namespace
}  // namespace gpt
