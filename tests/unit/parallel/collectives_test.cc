// Every collective of the MPI communicator on every group of a TP 2 x PP 2 x DP 2 grid (8 ranks),
// checked exactly as nccl-tests does: inputs are small integers (exact in FP32 and BF16), so every
// result has one right answer. Counts include odd sizes and sizes that are not vector multiples.
#include <mpi.h>

#include <memory>
#include <numeric>
#include <vector>

#include "core/bf16.h"
#include "gtest/gtest.h"
#include "parallel/mpi_grid.h"

namespace gpt {
namespace {

const GridShape kShape{2, 2, 2};  // tensor, pipeline, data
constexpr int64_t kCounts[] = {1, 7, 64, 1001};

ProcessGrid& grid() {
  static std::unique_ptr<ProcessGrid> instance = build_mpi_grid(kShape, /*timeout_seconds=*/120.0);
  return *instance;
}

Context& ctx() {
  static Context context = Context::cpu(1);
  return context;
}

std::vector<Communicator*> all_groups() {
  ProcessGrid& g = grid();
  return {&g.world(), &g.tensor(), &g.data(), &g.pipeline(), &g.embedding(), &g.model_parallel()};
}

// Value of element i contributed by group rank r: small integers, distinct per rank and element.
float contribution(int r, int64_t i) { return static_cast<float>((r + 1) * 3 + static_cast<int>(i % 13) - 20); }

template <typename T>
Tensor view(std::vector<T>& v) {
  return Tensor(v.data(), dtype_of<T>(), Shape({static_cast<int64_t>(v.size())}), Device::kCpu);
}

TEST(ProcessGrid, GroupsFollowMegatronRankOrder) {
  ProcessGrid& g = grid();
  ASSERT_EQ(g.world_size(), 8) << "run with mpirun -np 8";
  const GridCoordinates c = g.coordinates();
  EXPECT_EQ(g.world_rank(), c.tensor + 2 * (c.data + 2 * c.pipeline));
  EXPECT_EQ(g.tensor().rank(), c.tensor);
  EXPECT_EQ(g.data().rank(), c.data);
  EXPECT_EQ(g.pipeline().rank(), c.pipeline);
  EXPECT_EQ(g.model_parallel().size(), 4);
  EXPECT_EQ(g.embedding().size(), 2);  // first and last stage (PP = 2: every rank is in one)
  // The members of this rank's TP group are the world ranks with the same (dp, pp).
  std::vector<int> ranks(2);
  int me = g.world_rank();
  std::vector<int> received(2);
  g.tensor().all_gather(ctx(), view(received), Tensor(&me, DType::kInt32, Shape({1}), Device::kCpu));
  EXPECT_EQ(received[0], grid_rank(kShape, {0, c.pipeline, c.data}));
  EXPECT_EQ(received[1], grid_rank(kShape, {1, c.pipeline, c.data}));
}

TEST(Collectives, AllReduceSumAndMaxExactOnEveryGroup) {
  for (Communicator* group : all_groups()) {
    for (int64_t n : kCounts) {
      std::vector<float> data(static_cast<size_t>(n));
      for (int64_t i = 0; i < n; ++i) data[i] = contribution(group->rank(), i);
      group->all_reduce(ctx(), view(data), ReduceOp::kSum);
      for (int64_t i = 0; i < n; ++i) {
        float expected = 0;
        for (int r = 0; r < group->size(); ++r) expected += contribution(r, i);
        ASSERT_EQ(data[i], expected) << group->name() << " n=" << n << " i=" << i;
      }
      for (int64_t i = 0; i < n; ++i) data[i] = contribution(group->rank(), i);
      group->all_reduce(ctx(), view(data), ReduceOp::kMax);
      for (int64_t i = 0; i < n; ++i) ASSERT_EQ(data[i], contribution(group->size() - 1, i)) << group->name();
    }
  }
}

TEST(Collectives, Bf16AllReduceAccumulatesExactly) {
  for (Communicator* group : all_groups()) {
    std::vector<bf16> data(37);
    for (int64_t i = 0; i < 37; ++i) data[i] = bf16(contribution(group->rank(), i));
    group->all_reduce(ctx(), view(data), ReduceOp::kSum);
    for (int64_t i = 0; i < 37; ++i) {
      float expected = 0;
      for (int r = 0; r < group->size(); ++r) expected += contribution(r, i);
      ASSERT_EQ(data[i].to_float(), expected) << group->name();
    }
  }
}

TEST(Collectives, ReduceScatterAndAllGatherExactOnEveryGroup) {
  for (Communicator* group : all_groups()) {
    const int p = group->size();
    for (int64_t n : kCounts) {
      std::vector<float> input(static_cast<size_t>(n * p)), output(static_cast<size_t>(n), -1.0f);
      for (int64_t i = 0; i < n * p; ++i) input[i] = contribution(group->rank(), i);
      group->reduce_scatter(ctx(), view(output), view(input), ReduceOp::kSum);
      for (int64_t i = 0; i < n; ++i) {
        const int64_t global = group->rank() * n + i;
        float expected = 0;
        for (int r = 0; r < p; ++r) expected += contribution(r, global);
        ASSERT_EQ(output[i], expected) << group->name() << " n=" << n;
      }
      std::vector<int32_t> piece(static_cast<size_t>(n)), gathered(static_cast<size_t>(n * p), -1);
      for (int64_t i = 0; i < n; ++i) piece[i] = static_cast<int32_t>(group->rank() * 100000 + i);
      group->all_gather(ctx(), view(gathered), view(piece));
      for (int r = 0; r < p; ++r) {
        for (int64_t i = 0; i < n; ++i) ASSERT_EQ(gathered[r * n + i], r * 100000 + i) << group->name();
      }
    }
  }
}

TEST(Collectives, BroadcastFromEveryRoot) {
  for (Communicator* group : all_groups()) {
    for (int root = 0; root < group->size(); ++root) {
      std::vector<int64_t> data(11, group->rank() == root ? 0 : -7);
      if (group->rank() == root) std::iota(data.begin(), data.end(), int64_t{1000} * root);
      group->broadcast(ctx(), view(data), root);
      for (int64_t i = 0; i < 11; ++i) ASSERT_EQ(data[i], 1000 * root + i) << group->name() << " root " << root;
    }
  }
}

TEST(Collectives, BatchedSendReceiveAroundEveryRing) {
  for (Communicator* group : all_groups()) {
    const int p = group->size();
    if (p == 1) continue;
    const int next = (group->rank() + 1) % p, previous = (group->rank() + p - 1) % p;
    // Each rank sends to the next and receives from the previous in one batch: a cycle that would
    // deadlock with blocking sends.
    std::vector<float> outgoing(13), incoming(13, -1.0f);
    for (int i = 0; i < 13; ++i) outgoing[i] = contribution(group->rank(), i);
    const PeerTransfer transfers[] = {{PeerTransfer::Kind::kSend, view(outgoing), next},
                                      {PeerTransfer::Kind::kReceive, view(incoming), previous}};
    group->exchange(ctx(), transfers);
    for (int i = 0; i < 13; ++i) ASSERT_EQ(incoming[i], contribution(previous, i)) << group->name();
    group->barrier(ctx());
  }
}

}  // namespace
}  // namespace gpt
