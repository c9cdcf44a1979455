// Every collective of the MPI communicator (under mpirun) and of the Gloo communicator (under torchrun,
// the same file with torchrun_test_main.cc) on every group of a TP 2 x PP 2 x DP 2 grid (8 ranks),
// checked exactly as nccl-tests does: inputs are small integers (exact in FP32 and BF16), so every
// result has one right answer. Counts include odd sizes and sizes that are not vector multiples.
#include <mpi.h>

#include <memory>
#include <numeric>
#include <vector>

#include "core/float16.h"
#include "gtest/gtest.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/mpi_grid.h"
#include "test_grid.h"

namespace gpt {
namespace {

const GridShape kShape{2, 2, 2};  // tensor, pipeline, data
constexpr int64_t kCounts[] = {1, 7, 64, 1001};

ProcessGrid& grid() {
  static std::unique_ptr<ProcessGrid> instance = build_test_grid(kShape, /*timeout_seconds=*/120.0);
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

// Contiguous messages split into pieces (as a message beyond MPI's int count would be), here pieces
// of 3 elements: all-reduce, broadcast and batched send/receive stay exact.
TEST(Collectives, MessagesInPiecesStayExact) {
  MpiCommunicator::set_message_piece_for_testing(3);
  for (Communicator* group : all_groups()) {
    std::vector<float> data(17);
    for (int64_t i = 0; i < 17; ++i) data[i] = contribution(group->rank(), i);
    group->all_reduce(ctx(), view(data), ReduceOp::kSum);
    for (int64_t i = 0; i < 17; ++i) {
      float expected = 0;
      for (int r = 0; r < group->size(); ++r) expected += contribution(r, i);
      ASSERT_EQ(data[i], expected) << group->name() << " i=" << i;
    }
    std::vector<int64_t> broadcast(10, group->rank() == 0 ? 0 : -7);
    if (group->rank() == 0) std::iota(broadcast.begin(), broadcast.end(), int64_t{500});
    group->broadcast(ctx(), view(broadcast), 0);
    for (int64_t i = 0; i < 10; ++i) ASSERT_EQ(broadcast[i], 500 + i) << group->name();
    const int p = group->size();
    if (p == 1) continue;
    const int next = (group->rank() + 1) % p, previous = (group->rank() + p - 1) % p;
    std::vector<float> outgoing(11), incoming(11, -1.0f);
    for (int i = 0; i < 11; ++i) outgoing[i] = contribution(group->rank(), i);
    const PeerTransfer transfers[] = {{PeerTransfer::Kind::kSend, view(outgoing), next},
                                      {PeerTransfer::Kind::kReceive, view(incoming), previous}};
    group->exchange(ctx(), transfers);
    for (int i = 0; i < 11; ++i) ASSERT_EQ(incoming[i], contribution(previous, i)) << group->name();
  }
  MpiCommunicator::set_message_piece_for_testing(int64_t{1} << 30);
}

// Asynchronous forms: every kind of operation started on a group before any is waited on, then
// waited on in reverse order (completion must not depend on the order of waits); results exact.
// Two BF16 reductions in flight at once need separate host staging.
TEST(AsyncCollectives, EveryKindInFlightTogetherOnEveryGroup) {
  for (Communicator* group : all_groups()) {
    const int p = group->size(), r = group->rank();
    const int64_t n = 1001;
    std::vector<float> sums(n), maxima(n), scatter_in(static_cast<size_t>(n * p)), scattered(n, -1.0f);
    std::vector<bf16> bf_a(37), bf_b(64);
    std::vector<int32_t> piece(n), gathered(static_cast<size_t>(n * p), -1);
    std::vector<int64_t> broadcast(11, -7);
    std::vector<float> outgoing(13), incoming(13, -1.0f);
    for (int64_t i = 0; i < n; ++i) {
      sums[i] = maxima[i] = contribution(r, i);
      piece[i] = static_cast<int32_t>(r * 100000 + i);
    }
    for (int64_t i = 0; i < n * p; ++i) scatter_in[i] = contribution(r, i);
    for (int64_t i = 0; i < 37; ++i) bf_a[i] = bf16(contribution(r, i));
    for (int64_t i = 0; i < 64; ++i) bf_b[i] = bf16(contribution(r, i + 5));
    const int root = p - 1;
    if (r == root) std::iota(broadcast.begin(), broadcast.end(), int64_t{1000} * root);
    for (int i = 0; i < 13; ++i) outgoing[i] = contribution(r, i);
    const int next = (r + 1) % p, previous = (r + p - 1) % p;

    std::vector<CollectiveHandle> handles;
    handles.push_back(group->start_all_reduce(ctx(), view(sums), ReduceOp::kSum));
    handles.push_back(group->start_all_reduce(ctx(), view(maxima), ReduceOp::kMax));
    handles.push_back(group->start_all_reduce(ctx(), view(bf_a), ReduceOp::kSum));
    handles.push_back(group->start_all_reduce(ctx(), view(bf_b), ReduceOp::kSum));
    handles.push_back(group->start_reduce_scatter(ctx(), view(scattered), view(scatter_in), ReduceOp::kSum));
    handles.push_back(group->start_all_gather(ctx(), view(gathered), view(piece)));
    handles.push_back(group->start_broadcast(ctx(), view(broadcast), root));
    if (p > 1) {
      const PeerTransfer transfers[] = {{PeerTransfer::Kind::kSend, view(outgoing), next},
                                        {PeerTransfer::Kind::kReceive, view(incoming), previous}};
      handles.push_back(group->start_exchange(ctx(), transfers));
    }
    for (auto handle = handles.rbegin(); handle != handles.rend(); ++handle) handle->wait(ctx());
    for (const CollectiveHandle& handle : handles) ASSERT_FALSE(handle.pending());

    for (int64_t i = 0; i < n; ++i) {
      float expected = 0;
      for (int q = 0; q < p; ++q) expected += contribution(q, i);
      ASSERT_EQ(sums[i], expected) << group->name() << " i=" << i;
      ASSERT_EQ(maxima[i], contribution(p - 1, i)) << group->name();
      float expected_scattered = 0;
      for (int q = 0; q < p; ++q) expected_scattered += contribution(q, r * n + i);
      ASSERT_EQ(scattered[i], expected_scattered) << group->name();
      for (int q = 0; q < p; ++q) ASSERT_EQ(gathered[q * n + i], q * 100000 + i) << group->name();
    }
    for (int64_t i = 0; i < 37; ++i) {
      float expected = 0;
      for (int q = 0; q < p; ++q) expected += contribution(q, i);
      ASSERT_EQ(bf_a[i].to_float(), expected) << group->name();
    }
    for (int64_t i = 0; i < 64; ++i) {
      float expected = 0;
      for (int q = 0; q < p; ++q) expected += contribution(q, i + 5);
      ASSERT_EQ(bf_b[i].to_float(), expected) << group->name();
    }
    for (int64_t i = 0; i < 11; ++i) ASSERT_EQ(broadcast[i], 1000 * root + i) << group->name();
    if (p > 1) {
      for (int i = 0; i < 13; ++i) ASSERT_EQ(incoming[i], contribution(previous, i)) << group->name();
    }
  }
}

// One all-reduce in flight on every group at once (each rank starts them in the same order), as
// gradient buckets of different groups would be; waited on in start order.
TEST(AsyncCollectives, OnePerGroupInFlightAcrossGroups) {
  const std::vector<Communicator*> groups = all_groups();
  std::vector<std::vector<int64_t>> data(groups.size(), std::vector<int64_t>(7));
  std::vector<CollectiveHandle> handles;
  for (size_t g = 0; g < groups.size(); ++g) {
    for (int64_t i = 0; i < 7; ++i) data[g][i] = (groups[g]->rank() + 1) * 10 + i + static_cast<int64_t>(g);
    handles.push_back(groups[g]->start_all_reduce(ctx(), view(data[g]), ReduceOp::kSum));
  }
  for (CollectiveHandle& handle : handles) handle.wait(ctx());
  for (size_t g = 0; g < groups.size(); ++g) {
    const int64_t p = groups[g]->size();
    for (int64_t i = 0; i < 7; ++i) {
      ASSERT_EQ(data[g][i], 10 * p * (p + 1) / 2 + p * (i + static_cast<int64_t>(g))) << groups[g]->name();
    }
  }
}

TEST(AsyncCollectives, EmptyAndWaitedHandlesWaitForNothing) {
  CollectiveHandle empty;
  EXPECT_FALSE(empty.pending());
  empty.wait(ctx());
  std::vector<float> data(3, 1.0f);
  CollectiveHandle handle = grid().world().start_all_reduce(ctx(), view(data), ReduceOp::kSum);
  CollectiveHandle moved = std::move(handle);
  EXPECT_FALSE(handle.pending());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  moved.wait(ctx());
  moved.wait(ctx());  // a second wait is a no-op
  EXPECT_EQ(data, std::vector<float>(3, 8.0f));
}

}  // namespace
}  // namespace gpt
