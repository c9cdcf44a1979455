// Single-GPU training against the CPU reference backend: the losses of 50 BF16 steps agree within
// BF16 tolerance, and two GPU runs give bit-identical losses under --deterministic-mode (cuDNN
// attention's backward without atomics; every other kernel is deterministic in any mode: no
// atomics in reductions, sorted embedding gradients, cuBLASLt with a fixed algorithm per shape).
// Head dim 32 in BF16: the GPU runs cuDNN's fused attention.
#include <cmath>
#include <cstdio>
#include <vector>

#include "gpu/gpu_test_util.h"
#include "support/trainer_support.h"

namespace gpt {
namespace {

std::vector<double> losses(const char* device, int steps) {
  return testing_support::train_losses(
      {"t", "--device", device, "--bf16", "--mock-data", "--vocab-size", "1000", "--num-layers", "2",
       "--hidden-size", "128", "--num-attention-heads", "4", "--seq-length", "64", "--max-position-embeddings", "64",
       "--micro-batch-size", "4", "--global-batch-size", "16", "--train-iters", "50", "--lr", "1e-3",
       "--lr-warmup-iters", "5", "--eval-iters", "0", "--deterministic-mode"},
      steps);
}

TEST(GpuTraining, TracksTheCpuBackendAndIsBitwiseDeterministic) {
  GPT_REQUIRE_GPU();
  const std::vector<double> cpu = losses("cpu", 50);
  const std::vector<double> gpu = losses("cuda", 50);
  const std::vector<double> gpu_again = losses("cuda", 50);
  ASSERT_EQ(cpu.size(), 50u);
  ASSERT_EQ(gpu.size(), 50u);
  double worst = 0.0;
  for (size_t i = 0; i < cpu.size(); ++i) worst = std::max(worst, std::fabs(gpu[i] - cpu[i]) / cpu[i]);
  std::printf("GPU vs CPU, 50 BF16 steps: max relative loss difference %.3e (first %.6f vs %.6f, last %.6f vs %.6f)\n",
              worst, gpu.front(), cpu.front(), gpu.back(), cpu.back());
  EXPECT_LE(worst, 2e-2);
  EXPECT_LT(gpu.back(), gpu.front());
  EXPECT_EQ(gpu, gpu_again) << "two GPU runs differ";
}

}  // namespace
}  // namespace gpt
