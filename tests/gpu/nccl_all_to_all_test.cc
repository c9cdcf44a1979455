// The token dispatcher's variable-size all-to-all (parallel/comm/all_to_all.h) on device buffers
// over NCCL. NCCL refuses two ranks on one GPU, so on the one-GPU machine the group is of one rank:
// what runs is the rank's own block (copied on the compute stream, FP32 and BF16, zero rows), the
// counts' round trip through a device tensor (exchange_counts), and a kernel after the wait reading
// the result. The exchange between ranks (the grouped ncclSend/ncclRecv of start_exchange) is the
// one NcclCommunicator.ExchangeWithItselfOnItsOwnStream checks; its multi-rank use by the
// all-to-all is checked over MPI and Gloo (tests/unit/parallel/all_to_all_mpi_test.cc), and over
// MPI with device buffers on the shared GPU by scripts/device/gpu_check.sh (mpi_all_to_all_cuda).
#include <cstdint>
#include <vector>

#include "core/arena.h"
#include "core/float16.h"
#include "core/memory.h"
#include "gpu/gpu_test_util.h"
#include "kernels/ops.h"
#include "parallel/comm/all_to_all.h"
#include "parallel/comm/nccl_communicator.h"
#include "parallel/comm/self_communicator.h"

namespace gpt {
namespace {

template <typename T>
std::vector<T> to_host(Context& ctx, const Tensor& t) {
  ctx.synchronize();
  std::vector<T> host(static_cast<size_t>(t.numel()));
  copy_bytes(Device::kCpu, host.data(), Device::kCuda, t.data(), t.bytes());
  return host;
}

template <typename T>
Tensor to_device(Arena& arena, const std::vector<T>& host, int64_t width) {
  Tensor t = arena.allocate(dtype_of<T>(), {static_cast<int64_t>(host.size()) / width, width});
  copy_bytes(Device::kCuda, t.data(), Device::kCpu, host.data(), t.bytes());
  return t;
}

TEST(NcclAllToAll, OwnBlockOnTheDevice) {
  GPT_REQUIRE_GPU();
  Context ctx = Context::gpu(0);
  SelfCommunicator bootstrap("bootstrap");
  NcclCommunicator nccl(ctx, bootstrap, "expert-exchange", 60.0);
  ASSERT_EQ(nccl.size(), 1);
  Arena arena(Device::kCuda, "nccl-all-to-all-test");
  for (int64_t rows : {0, 1, 37}) {
    for (int64_t width : {1, 5, 4096}) {
      const std::vector<int64_t> send_rows = {rows};
      const std::vector<int64_t> receive_rows = exchange_counts(nccl, ctx, send_rows);
      ASSERT_EQ(receive_rows, send_rows);
      std::vector<float> values(static_cast<size_t>(rows * width));
      for (size_t i = 0; i < values.size(); ++i) values[i] = static_cast<float>(i % 251) - 125.0f;
      const Tensor send = to_device(arena, values, width);
      const Tensor receive = arena.allocate(DType::kFloat32, {rows, width});
      ops::poison(ctx, receive);
      CollectiveHandle handle = start_all_to_all_rows(nccl, ctx, send, send_rows, receive, receive_rows);
      handle.wait(ctx);
      ops::scale(ctx, receive, 2.0f);  // on the compute stream, after the wait
      const std::vector<float> back = to_host<float>(ctx, receive);
      for (size_t i = 0; i < values.size(); ++i) ASSERT_EQ(back[i], 2.0f * values[i]) << rows << " x " << width;

      std::vector<bf16> halves(values.size());
      for (size_t i = 0; i < halves.size(); ++i) halves[i] = bf16(values[i]);
      const Tensor send16 = to_device(arena, halves, width);
      const Tensor receive16 = arena.allocate(DType::kBFloat16, {rows, width});
      ops::poison(ctx, receive16);
      all_to_all_rows(nccl, ctx, send16, send_rows, receive16, receive_rows);
      const std::vector<bf16> back16 = to_host<bf16>(ctx, receive16);
      for (size_t i = 0; i < halves.size(); ++i) ASSERT_EQ(back16[i].bits, halves[i].bits) << i;
    }
  }
}

// The counts through a workspace from the caller's arena (what the training step passes), which
// must be left as the exchange wrote it: the counts sent, then the counts received.
TEST(NcclAllToAll, CountsThroughAnArenaWorkspace) {
  GPT_REQUIRE_GPU();
  Context ctx = Context::gpu(0);
  SelfCommunicator bootstrap("bootstrap");
  NcclCommunicator nccl(ctx, bootstrap, "expert-exchange", 60.0);
  Arena arena(Device::kCuda, "nccl-all-to-all-test");
  const Tensor workspace = arena.allocate(DType::kInt64, {2});
  for (int64_t rows : {int64_t{0}, int64_t{12345}, int64_t{1} << 40}) {
    const std::vector<int64_t> send_rows = {rows};
    EXPECT_EQ(exchange_counts(nccl, ctx, send_rows, workspace), send_rows);
    EXPECT_EQ(to_host<int64_t>(ctx, workspace), std::vector<int64_t>({rows, rows}));
  }
}

TEST(NcclAllToAll, RefusesHostTensors) {
  GPT_REQUIRE_GPU();
  Context ctx = Context::gpu(0);
  SelfCommunicator bootstrap("bootstrap");
  NcclCommunicator nccl(ctx, bootstrap, "expert-exchange", 60.0);
  std::vector<float> host(6);
  const Tensor on_host(host.data(), DType::kFloat32, Shape({2, 3}), Device::kCpu);
  const std::vector<int64_t> two = {2};
  EXPECT_DEATH(all_to_all_rows(nccl, ctx, on_host, two, on_host, two),
               "group 'expert-exchange' \\(rank 0 of 1\\): .* must be on the context's device \\(cuda\\)");
}

}  // namespace
}  // namespace gpt
