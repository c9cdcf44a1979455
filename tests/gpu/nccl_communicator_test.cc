// NCCL with one rank per GPU: on a one-GPU machine, a group of one. Every collective is checked
// exactly on device buffers, including odd counts and BF16.
#include <vector>

#include "core/arena.h"
#include "core/float16.h"
#include "core/memory.h"
#include "gpu/gpu_test_util.h"
#include "kernels/ops.h"
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

// Asynchronous forms: several operations started before any wait, waited on in reverse order,
// then a kernel on the compute stream that reads a result (ordered by the wait, with no host
// synchronization in between); results exact.
TEST(NcclCommunicator, SeveralInFlightBeforeAnyWait) {
  GPT_REQUIRE_GPU();
  Context ctx = Context::gpu(0);
  SelfCommunicator bootstrap("bootstrap");
  NcclCommunicator nccl(ctx, bootstrap, "nccl-test", 60.0);
  Arena arena(Device::kCuda, "nccl-test");
  const int64_t n = 1001;
  std::vector<float> values(static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) values[i] = static_cast<float>(i % 17) - 8.0f;
  std::vector<bf16> halves(37);
  for (int i = 0; i < 37; ++i) halves[i] = bf16(static_cast<float>(i) - 18.0f);
  Tensor summed = to_device(arena, values), maximum = to_device(arena, values), source = to_device(arena, values);
  Tensor broadcast = to_device(arena, values), bf = to_device(arena, halves);
  Tensor scattered = arena.allocate(DType::kFloat32, {n}), gathered = arena.allocate(DType::kFloat32, {n});
  std::vector<CollectiveHandle> handles;
  handles.push_back(nccl.start_all_reduce(ctx, summed, ReduceOp::kSum));
  handles.push_back(nccl.start_all_reduce(ctx, maximum, ReduceOp::kMax));
  handles.push_back(nccl.start_reduce_scatter(ctx, scattered, source, ReduceOp::kSum));
  handles.push_back(nccl.start_all_gather(ctx, gathered, source));
  handles.push_back(nccl.start_broadcast(ctx, broadcast, 0));
  handles.push_back(nccl.start_all_reduce(ctx, bf, ReduceOp::kSum));
  for (auto handle = handles.rbegin(); handle != handles.rend(); ++handle) handle->wait(ctx);
  ops::scale(ctx, summed, 2.0f);  // on the compute stream, after the wait
  std::vector<float> doubled = values;
  for (float& v : doubled) v *= 2.0f;
  EXPECT_EQ(to_host<float>(ctx, summed), doubled);
  EXPECT_EQ(to_host<float>(ctx, maximum), values);
  EXPECT_EQ(to_host<float>(ctx, scattered), values);
  EXPECT_EQ(to_host<float>(ctx, gathered), values);
  EXPECT_EQ(to_host<float>(ctx, broadcast), values);
  const std::vector<bf16> back = to_host<bf16>(ctx, bf);
  for (int i = 0; i < 37; ++i) EXPECT_EQ(back[i].bits, halves[i].bits);
}

// The point-to-point form context parallelism's ring (K/V blocks and their gradients) and
// all-to-all (head/sequence re-layout) use: one group call of sends and receives on the
// communicator's own stream. With one rank every peer is this rank: two blocks (BF16 and FP16, the
// dtypes the ring carries) sent to itself arrive exactly, in order of the transfers, and a kernel
// queued on the compute stream after the wait reads the received block.
TEST(NcclCommunicator, ExchangeWithItselfOnItsOwnStream) {
  GPT_REQUIRE_GPU();
  Context ctx = Context::gpu(0);
  SelfCommunicator bootstrap("bootstrap");
  NcclCommunicator nccl(ctx, bootstrap, "nccl-test", 60.0);
  Arena arena(Device::kCuda, "nccl-test");
  std::vector<bf16> block(1001);
  std::vector<fp16> other(37);
  for (size_t i = 0; i < block.size(); ++i) block[i] = bf16(static_cast<float>(i % 29) - 14.0f);
  for (size_t i = 0; i < other.size(); ++i) other[i] = fp16(0.5f * static_cast<float>(i) - 9.0f);
  Tensor send_block = to_device(arena, block), send_other = to_device(arena, other);
  Tensor receive_block = arena.allocate(DType::kBFloat16, {1001}), receive_other = arena.allocate(DType::kFloat16, {37});
  ops::poison(ctx, receive_block);
  ops::poison(ctx, receive_other);
  const PeerTransfer transfers[] = {{PeerTransfer::Kind::kSend, send_block, 0},
                                    {PeerTransfer::Kind::kSend, send_other, 0},
                                    {PeerTransfer::Kind::kReceive, receive_block, 0},
                                    {PeerTransfer::Kind::kReceive, receive_other, 0}};
  CollectiveHandle handle = nccl.start_exchange(ctx, transfers);
  handle.wait(ctx);
  // On the compute stream, after the wait: widen the received block into FP32 and scale it.
  Tensor widened = arena.allocate(DType::kFloat32, {1001});
  ops::cast(ctx, widened, receive_block);
  ops::scale(ctx, widened, 2.0f);
  const std::vector<bf16> back = to_host<bf16>(ctx, receive_block);
  for (size_t i = 0; i < block.size(); ++i) ASSERT_EQ(back[i].bits, block[i].bits) << i;
  const std::vector<fp16> back_other = to_host<fp16>(ctx, receive_other);
  for (size_t i = 0; i < other.size(); ++i) ASSERT_EQ(back_other[i].bits, other[i].bits) << i;
  const std::vector<float> doubled = to_host<float>(ctx, widened);
  for (size_t i = 0; i < block.size(); ++i) ASSERT_EQ(doubled[i], 2.0f * block[i].to_float()) << i;
  // FP16 sums (the FP16 gradient buffers' reduction) with one rank are the values themselves.
  Tensor summed = to_device(arena, other);
  nccl.all_reduce(ctx, summed, ReduceOp::kSum);
  const std::vector<fp16> summed_back = to_host<fp16>(ctx, summed);
  for (size_t i = 0; i < other.size(); ++i) EXPECT_EQ(summed_back[i].bits, other[i].bits) << i;
}

TEST(NcclCommunicator, DroppingAnUnwaitedHandleIsFatal) {
  GPT_REQUIRE_GPU();
  // The statement uses the GPU: a forked child of a process that already initialized CUDA cannot
  // (cudaSetDevice fails with "initialization error"), so the child re-executes the binary.
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_DEATH(
      {
        Context ctx = Context::gpu(0);
        SelfCommunicator bootstrap("bootstrap");
        NcclCommunicator nccl(ctx, bootstrap, "nccl-test", 60.0);
        Arena arena(Device::kCuda, "nccl-test");
        Tensor data = arena.allocate(DType::kFloat32, {8});
        static_cast<void>(nccl.start_all_reduce(ctx, data, ReduceOp::kSum));  // dropped at once
      },
      "all_reduce on group 'nccl-test' \\(NCCL\\) was started but never waited on");
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
