// ZeRO-2's gradient shards (parallel/data_parallel/grad_shards.h) under mpirun -np 4 (TP 2 x DP 2,
// and the world of 4): units write small integers into their buckets' working buffers over several
// microbatches, with buckets written by two units (the tied embedding's), more buckets live than
// buffers (early reductions) and reductions left in flight; each rank's shards must hold exactly
// the sum over ranks and writes of what was written into them, and a released bucket's gradients
// must be detached.
#include <map>
#include <memory>
#include <vector>

#include "core/arena.h"
#include "gtest/gtest.h"
#include "parallel/data_parallel/grad_shards.h"
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

// What group rank r writes into flat element i in its k-th write: a small integer (exact in FP32).
float written(int r, int k, int64_t i) { return static_cast<float>((r + 1) * 5 + k * 3 + static_cast<int>(i % 7) - 9); }

struct Scenario {
  std::vector<int64_t> bucket_parts;  // bucket sizes in units of the group size
  int buffers;
  bool overlap;
  // Per microbatch, the units in order, each the buckets it writes.
  std::vector<std::vector<int>> units;
};

void run(Communicator& group, const Scenario& s) {
  const int p = group.size();
  std::vector<BucketShard> buckets;
  int64_t begin = 0, shard_elements = 0;
  for (int64_t parts : s.bucket_parts) {
    const int64_t size = parts * p, part = parts;
    buckets.push_back({{begin, begin + size}, {begin + group.rank() * part, begin + (group.rank() + 1) * part}});
    begin += size;
    shard_elements += part;
  }
  std::vector<int> writers(buckets.size(), 0);
  for (const std::vector<int>& unit : s.units) {
    for (int b : unit) ++writers[static_cast<size_t>(b)];
  }
  Arena arena(Device::kCpu, "grad_shards_test");
  const Tensor shards = arena.allocate_zeroed(DType::kFloat32, {shard_elements});
  std::map<int, Tensor> views;  // bucket -> its working buffer while held
  GradientShards grads(group, shards, buckets, s.buffers, s.overlap,
                       [&](int bucket, const Tensor& buffer) {
                         if (buffer.defined()) {
                           EXPECT_EQ(buffer.numel(), buckets[static_cast<size_t>(bucket)].bucket.size());
                           views[bucket] = buffer;
                         } else {
                           views.erase(bucket);
                         }
                       },
                       arena);
  std::vector<float> expected(static_cast<size_t>(begin), 0.0f);  // flat, summed over ranks
  int k = 0;
  for (int microbatch = 0; microbatch < 3; ++microbatch) {
    std::vector<int> done(buckets.size(), 0);
    for (const std::vector<int>& unit : s.units) {
      for (int b : unit) grads.take(ctx(), b);
      for (int b : unit) {
        ASSERT_TRUE(views.count(b)) << "bucket " << b << " taken without a buffer";
        float* data = views[b].data_as<float>();
        const Range& range = buckets[static_cast<size_t>(b)].bucket;
        for (int64_t i = range.begin; i < range.end; ++i) {
          data[i - range.begin] += written(group.rank(), k, i);  // gradients accumulate (+=)
          for (int r = 0; r < p; ++r) expected[static_cast<size_t>(i)] += written(r, k, i);
        }
      }
      ++k;
      for (int b : unit) grads.done(ctx(), b, ++done[static_cast<size_t>(b)] == writers[static_cast<size_t>(b)]);
      grads.progress();
    }
  }
  grads.finish(ctx());
  EXPECT_TRUE(views.empty()) << "gradients still attached after finish";
  int64_t offset = 0;
  for (const BucketShard& b : buckets) {
    for (int64_t i = b.shard.begin; i < b.shard.end; ++i) {
      ASSERT_EQ(shards.data_as<float>()[offset + (i - b.shard.begin)], expected[static_cast<size_t>(i)])
          << group.name() << " element " << i;
    }
    offset += b.shard.size();
  }
}

TEST(GradientShards, SumsExactOverMicrobatchesBuffersAndGroups) {
  const std::vector<Scenario> scenarios = {
      // GPT on one stage: output unit [0 and the tied embedding 3], layers [1], [2], embedding [3].
      {{8, 3, 5, 6}, 2, false, {{0, 3}, {1}, {2}, {3}}},
      {{8, 3, 5, 6}, 3, true, {{0, 3}, {1}, {2}, {3}}},
      // Every bucket the same size: the held embedding bucket is reduced early to free a buffer.
      {{4, 4, 4, 4}, 2, true, {{0, 3}, {1}, {2}, {3}}},
      // Units merged into one bucket (two writers of bucket 0 in a row), odd sizes.
      {{7, 1, 13}, 2, false, {{0}, {0}, {1, 2}}},
      {{7, 1, 13}, 3, true, {{0}, {0}, {1, 2}}},
  };
  for (Communicator* group : {&grid().data(), &grid().world()}) {
    for (size_t i = 0; i < scenarios.size(); ++i) {
      SCOPED_TRACE("scenario " + std::to_string(i) + " on " + group->name());
      run(*group, scenarios[i]);
    }
  }
}

}  // namespace
}  // namespace gpt
