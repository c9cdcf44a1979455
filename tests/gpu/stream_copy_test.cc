// Stream-ordered host <-> device copies (core/stream_copy.h) and the promise they serve: a
// training step on the GPU never waits for the whole device.
#include <cmath>
#include <cstdint>
#include <span>
#include <vector>

#include "core/arena.h"
#include "core/cuda_runtime.h"
#include "core/stream_copy.h"
#include "gpu/gpu_test_util.h"
#include "kernels/ops.h"
#include "support/trainer_support.h"

namespace gpt {
namespace {

TEST(StreamCopy, OrderedWithTheStreamWithoutWaitingForTheDevice) {
  GPT_REQUIRE_GPU();
  Context ctx = Context::gpu(0);
  Arena arena(Device::kCuda, "stream-copy-test", 1 << 20);
  Tensor first = arena.allocate(DType::kInt32, {1001}), second = arena.allocate(DType::kInt32, {1001});
  ctx.synchronize();
  const size_t device_waits = cuda::device_synchronizations();
  // One pageable host buffer refilled right after each copy: CUDA staged it at the call.
  std::vector<int32_t> host(1001);
  for (int32_t i = 0; i < 1001; ++i) host[i] = i;
  copy_to_device(ctx, first, std::span<const int32_t>(host));
  for (int32_t i = 0; i < 1001; ++i) host[i] = -i;
  copy_to_device(ctx, second, std::span<const int32_t>(host));
  host.assign(host.size(), 7);
  std::vector<int32_t> back_first(1001), back_second(1001);
  copy_to_host(ctx, back_first.data(), first);
  copy_to_host(ctx, back_second.data(), second);
  ctx.synchronize();
  for (int32_t i = 0; i < 1001; ++i) {
    ASSERT_EQ(back_first[i], i);
    ASSERT_EQ(back_second[i], -i);
  }
  // A kernel queued before the read is seen by it.
  Tensor loss = arena.allocate(DType::kFloat32, {1});
  const float five = 5.0f;
  copy_to_device(ctx, loss, &five);
  ops::scale(ctx, loss, 3.0f);
  float read = 0.0f;
  copy_to_host(ctx, &read, loss);
  ctx.synchronize();
  EXPECT_EQ(read, 15.0f);
  EXPECT_EQ(cuda::device_synchronizations(), device_waits);
}

TEST(StreamCopy, HostTensorsOnTheCpuBackendAreImmediate) {
  Context ctx = Context::cpu(1);
  std::vector<float> storage(4, 0.0f);
  Tensor t(storage.data(), DType::kFloat32, Shape({4}), Device::kCpu);
  const std::vector<float> values = {1.0f, 2.0f, 3.0f, 4.0f};
  copy_to_device(ctx, t, std::span<const float>(values));
  EXPECT_EQ(storage, values);
  std::vector<float> back(4);
  copy_to_host(ctx, back.data(), t);
  EXPECT_EQ(back, values);
}

TEST(StreamCopy, TrainingStepsNeverWaitForTheWholeDevice) {
  GPT_REQUIRE_GPU();
  std::unique_ptr<ProcessGrid> grid;
  std::unique_ptr<Trainer> trainer = testing_support::make_trainer(
      {"t", "--device", "cuda", "--bf16", "--mock-data", "--vocab-size", "1000", "--num-layers", "2",
       "--hidden-size", "128", "--num-attention-heads", "4", "--seq-length", "64", "--max-position-embeddings", "64",
       "--micro-batch-size", "2", "--global-batch-size", "8", "--train-iters", "10", "--lr", "1e-3",
       "--eval-iters", "0"},
      grid);
  ASSERT_NE(trainer, nullptr);
  trainer->train_step();  // the first step may still size lazily allocated workspaces
  const size_t device_waits = cuda::device_synchronizations();
  for (int step = 0; step < 3; ++step) EXPECT_TRUE(std::isfinite(trainer->train_step().loss));
  EXPECT_EQ(cuda::device_synchronizations(), device_waits) << "a training step waited for the whole device";
}

}  // namespace
}  // namespace gpt
