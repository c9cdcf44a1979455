// NCCL with one rank per GPU: on a one-GPU machine, a group of one. Every collective is checked
// exactly on device buffers, including odd counts and BF16.
#include <vector>

#include "core/arena.h"
#include "core/bf16.h"
#include "core/memory.h"
#include "gpu/gpu_test_util.h"
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
Tensor to_device(Arena& arena, const std::vector<T>& host) {
  Tensor t = arena.allocate(dtype_of<T>(), {static_cast<int64_t>(host.size())});
  copy_bytes(Device::kCuda, t.data(), Device::kCpu, host.data(), t.bytes());
  return t;
}

TEST(NcclCommunicator, EveryCollectiveWithOneRank) {
  GPT_REQUIRE_GPU();
  Context ctx = Context::gpu(0);
  SelfCommunicator bootstrap("bootstrap");
  NcclCommunicator nccl(ctx, bootstrap, "nccl-test", 60.0);
  ASSERT_EQ(nccl.size(), 1);
  Arena arena(Device::kCuda, "nccl-test");
  for (int64_t n : {1, 7, 1001}) {
    std::vector<float> values(static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 17) - 8.0f;
    Tensor data = to_device(arena, values);
    nccl.all_reduce(ctx, data, ReduceOp::kSum);
    EXPECT_EQ(to_host<float>(ctx, data), values);
    nccl.all_reduce(ctx, data, ReduceOp::kMax);
    EXPECT_EQ(to_host<float>(ctx, data), values);
    Tensor out = arena.allocate(DType::kFloat32, {n});
    nccl.reduce_scatter(ctx, out, data, ReduceOp::kSum);
    EXPECT_EQ(to_host<float>(ctx, out), values);
    Tensor gathered = arena.allocate(DType::kFloat32, {n});
    nccl.all_gather(ctx, gathered, data);
    EXPECT_EQ(to_host<float>(ctx, gathered), values);
    nccl.broadcast(ctx, data, 0);
    EXPECT_EQ(to_host<float>(ctx, data), values);
  }
  std::vector<bf16> halves(37);
  for (int i = 0; i < 37; ++i) halves[i] = bf16(static_cast<float>(i) - 18.0f);
  Tensor bf = to_device(arena, halves);
  nccl.all_reduce(ctx, bf, ReduceOp::kSum);
  const std::vector<bf16> back = to_host<bf16>(ctx, bf);
  for (int i = 0; i < 37; ++i) EXPECT_EQ(back[i].bits, halves[i].bits);
  nccl.barrier(ctx);
}

TEST(NcclCommunicator, RefusesHostTensors) {
  GPT_REQUIRE_GPU();
  Context ctx = Context::gpu(0);
  SelfCommunicator bootstrap("bootstrap");
  NcclCommunicator nccl(ctx, bootstrap, "nccl-test", 60.0);
  float value = 1.0f;
  EXPECT_DEATH(nccl.all_reduce(ctx, Tensor(&value, DType::kFloat32, Shape({1}), Device::kCpu), ReduceOp::kSum),
               "host tensor");
}

}  // namespace
}  // namespace gpt
