// ZeRO-3's gathered units (parallel/data_parallel/param_units.h) under mpirun -np 4 (TP 2 x DP 2,
// and the world of 4): every rank's shards hold small integers that name the rank and the element;
// an acquired bucket's buffer must hold exactly every rank's shard in rank order, a unit found
// still gathered must not be gathered again, the least recently used unheld buffer is the one
// taken, a prefetch must not take a held buffer, and after invalidate() the parameters must be
// detached and the changed shards gathered anew.
#include <map>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "gtest/gtest.h"
#include "parallel/data_parallel/param_units.h"
#include "parallel/mpi_grid.h"
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

// The value of flat element i in version v of the parameters (exact in FP32): the element names
// itself, so a piece from the wrong rank or offset shows.
float value_of(int64_t i, int version) { return static_cast<float>(i * 3 + version * 1000 + 1); }

struct Units {
  std::vector<BucketShard> buckets;
  Tensor shards;
  std::map<int, Tensor> views;  // bucket -> its gathered buffer while the parameters point into it
  std::unique_ptr<ParamUnits> units;

  Units(Communicator& group, const std::vector<int64_t>& parts, int buffers, Arena& arena) {
    const int p = group.size();
    int64_t begin = 0, shard_elements = 0;
    for (int64_t part : parts) {
      buckets.push_back({{begin, begin + part * p}, {begin + group.rank() * part, begin + (group.rank() + 1) * part}});
      begin += part * p;
      shard_elements += part;
    }
    shards = arena.allocate_zeroed(DType::kFloat32, {shard_elements});
    write_version(0);
    units = std::make_unique<ParamUnits>(
        group, shards, buckets, buffers,
        [this](int bucket, const Tensor& buffer) {
          if (buffer.defined()) {
            EXPECT_EQ(buffer.numel(), buckets[static_cast<size_t>(bucket)].bucket.size());
            views[bucket] = buffer;
          } else {
            views.erase(bucket);
          }
        },
        arena);
  }

  void write_version(int version) {
    int64_t offset = 0;
    for (const BucketShard& b : buckets) {
      for (int64_t i = b.shard.begin; i < b.shard.end; ++i) shards.data_as<float>()[offset++] = value_of(i, version);
    }
  }

  // The parameters of bucket b point at every element of the bucket, from every rank, in order.
  void expect_gathered(int bucket, int version) {
    ASSERT_TRUE(views.count(bucket)) << "bucket " << bucket << " acquired but not pointed at";
    const Range& range = buckets[static_cast<size_t>(bucket)].bucket;
    for (int64_t i = range.begin; i < range.end; ++i) {
      ASSERT_EQ(views[bucket].data_as<float>()[i - range.begin], value_of(i, version)) << "element " << i;
    }
  }
};

TEST(ParamUnits, GathersExactlyAndKeepsWhatItGathered) {
  for (Communicator* group : {&grid().data(), &grid().world()}) {
    SCOPED_TRACE(group->name());
    Arena arena(Device::kCpu, "param_units_test");
    // GPT on one stage: the output unit [bucket 0], two layers [1], [2], the embedding [3] (largest).
    Units u(*group, {3, 5, 5, 8}, /*buffers=*/2, arena);
    ParamUnits& units = *u.units;
    // Forward: the embedding, then the layers, then the output with the tied embedding (two at once).
    units.acquire(ctx(), 3);
    u.expect_gathered(3, 0);
    units.release(3);
    units.acquire(ctx(), 1);
    u.expect_gathered(1, 0);
    units.release(1);
    EXPECT_EQ(units.counters().gathers, 2);
    units.acquire(ctx(), 1);  // still gathered: no new gather
    units.release(1);
    EXPECT_EQ(units.counters().gathers, 2);
    units.acquire(ctx(), 2);  // takes the least recently used unheld buffer of its size
    u.expect_gathered(2, 0);
    EXPECT_FALSE(u.views.count(1)) << "the evicted bucket's parameters still point into the buffer";
    units.release(2);
    units.acquire(ctx(), 0);
    units.acquire(ctx(), 3);  // the embedding: the first (largest) buffer
    u.expect_gathered(0, 0);
    u.expect_gathered(3, 0);
    // Both buffers held: a prefetch takes nothing.
    units.prefetch(ctx(), 1);
    EXPECT_EQ(units.counters().prefetches, 0);
    units.release(0);
    units.release(3);
    EXPECT_EQ(units.counters().gathers, 4);
    EXPECT_EQ(units.counters().gathered_elements, (5 + 5 + 3 + 8) * group->size());
    // A prefetch while a unit computes lands in the other buffer; its acquire gathers nothing new.
    units.acquire(ctx(), 2);
    units.prefetch(ctx(), 1);
    EXPECT_EQ(units.counters().prefetches, 1);
    units.release(2);
    units.acquire(ctx(), 1);
    u.expect_gathered(1, 0);
    units.release(1);
    EXPECT_EQ(units.counters().gathers, 6);
    // The optimizer step changes the shards: everything is forgotten and gathered anew.
    u.write_version(1);
    units.invalidate(ctx());
    EXPECT_TRUE(u.views.empty()) << "parameters still point into buffers after invalidate";
    for (int bucket : {3, 1, 2, 0}) {
      units.acquire(ctx(), bucket);
      u.expect_gathered(bucket, 1);
      units.release(bucket);
    }
    EXPECT_EQ(units.counters().gathers, 10);
    units.invalidate(ctx());
  }
}

TEST(ParamUnits, WorkingBuffersAreTheLargestAndSecondLargestBucket) {
  const std::vector<BucketShard> buckets = {{{0, 6}, {0, 3}}, {{6, 26}, {6, 16}}, {{26, 34}, {26, 30}}};
  // 20 elements for the first buffer, 8 for the others, FP32, each aligned by the arena.
  EXPECT_EQ(ParamUnits::bytes(buckets, DType::kFloat32, 3),
            Arena::aligned_bytes(DType::kFloat32, Shape{20}) + 2 * Arena::aligned_bytes(DType::kFloat32, Shape{8}));
}

}  // namespace
}  // namespace gpt
