// The variable-size all-to-all (parallel/comm/all_to_all.h) on a group of one: the rank's own
// block is copied exactly (FP32 and BF16, several widths, zero rows), the counts come back as sent,
// and every size or shape mismatch is fatal with a message naming the group, the rank and the
// mismatch. The multi-rank exchange is all_to_all_mpi_test.cc (mpirun and torchrun).
#include <cstdint>
#include <vector>

#include "core/float16.h"
#include "gtest/gtest.h"
#include "parallel/comm/all_to_all.h"
#include "parallel/comm/self_communicator.h"

namespace gpt {
namespace {

template <typename T>
Tensor matrix(std::vector<T>& data, int64_t rows, int64_t width) {
  data.resize(static_cast<size_t>(rows * width));
  return Tensor(data.data(), dtype_of<T>(), Shape({rows, width}), Device::kCpu);
}

TEST(AllToAllRows, GroupOfOneCopiesItsOwnBlock) {
  Context ctx = Context::cpu(1);
  SelfCommunicator self("expert-exchange");
  for (int64_t rows : {0, 1, 5}) {
    for (int64_t width : {1, 3, 64}) {
      std::vector<float> sent, received;
      const Tensor send = matrix(sent, rows, width), receive = matrix(received, rows, width);
      for (size_t i = 0; i < sent.size(); ++i) sent[i] = static_cast<float>(i) * 0.25f - 3.0f;
      std::fill(received.begin(), received.end(), -1e9f);
      const std::vector<int64_t> counts = {rows};
      CollectiveHandle handle = start_all_to_all_rows(self, ctx, send, counts, receive, counts);
      handle.wait(ctx);
      EXPECT_EQ(received, sent) << rows << " x " << width;

      std::vector<bf16> sent16, received16;
      const Tensor send16 = matrix(sent16, rows, width), receive16 = matrix(received16, rows, width);
      for (size_t i = 0; i < sent16.size(); ++i) sent16[i] = bf16(static_cast<float>(i % 200) - 100.0f);
      all_to_all_rows(self, ctx, send16, counts, receive16, counts);
      for (size_t i = 0; i < sent16.size(); ++i) ASSERT_EQ(received16[i].bits, sent16[i].bits) << i;
    }
  }
}

TEST(AllToAllRows, CountsOfAGroupOfOneAreItsOwn) {
  Context ctx = Context::cpu(1);
  SelfCommunicator self("expert-exchange");
  for (int64_t rows : {int64_t{0}, int64_t{7}, int64_t{1} << 40}) {
    const std::vector<int64_t> send_rows = {rows};
    EXPECT_EQ(exchange_counts(self, ctx, send_rows), send_rows);
    std::vector<int64_t> space(2, -1);
    const Tensor workspace(space.data(), DType::kInt64, Shape({2}), Device::kCpu);
    EXPECT_EQ(exchange_counts(self, ctx, send_rows, workspace), send_rows);
  }
}

TEST(AllToAllRowsDeathTest, MismatchesNameTheGroupAndRank) {
  Context ctx = Context::cpu(1);
  SelfCommunicator self("expert-exchange");
  std::vector<float> a, b, c;
  std::vector<bf16> d;
  const Tensor send = matrix(a, 4, 3), receive = matrix(b, 4, 3), wide = matrix(c, 4, 5), half = matrix(d, 4, 3);
  const std::vector<int64_t> four = {4}, three = {3}, two_peers = {2, 2}, negative = {-4};
  EXPECT_DEATH(all_to_all_rows(self, ctx, send, two_peers, receive, four),
               "group 'expert-exchange' \\(rank 0 of 1\\): send_rows has 2 counts");
  EXPECT_DEATH(all_to_all_rows(self, ctx, send, four, receive, two_peers),
               "group 'expert-exchange' \\(rank 0 of 1\\): receive_rows has 2 counts");
  EXPECT_DEATH(all_to_all_rows(self, ctx, send, three, receive, four), "the send counts add up to 3 rows");
  EXPECT_DEATH(all_to_all_rows(self, ctx, send, four, receive, three), "the receive counts add up to 3 rows");
  EXPECT_DEATH(all_to_all_rows(self, ctx, send, negative, receive, four), "send_rows\\[0\\] is negative");
  EXPECT_DEATH(all_to_all_rows(self, ctx, send, four, wide, four), "differ in width or dtype");
  EXPECT_DEATH(all_to_all_rows(self, ctx, send, four, half, four), "differ in width or dtype");
  EXPECT_DEATH(all_to_all_rows(self, ctx, send.view({12}), four, receive, four), "must be \\[rows, width\\] matrices");
  std::vector<float> e;
  const Tensor shorter = matrix(e, 3, 3);
  EXPECT_DEATH(all_to_all_rows(self, ctx, send, four, shorter, three), "sends itself and the one it receives from");
  EXPECT_DEATH(exchange_counts(self, ctx, two_peers), "exchange_counts on group 'expert-exchange' \\(rank 0 of 1\\): 2 "
                                                     "send counts");
  std::vector<int64_t> space(3);
  EXPECT_DEATH(exchange_counts(self, ctx, four, Tensor(space.data(), DType::kInt64, Shape({3}), Device::kCpu)),
               "the workspace .* must be int64 \\[2\\]");
}

}  // namespace
}  // namespace gpt
