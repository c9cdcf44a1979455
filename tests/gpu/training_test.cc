// Single-GPU training against the CPU reference backend: the losses of 50 BF16 steps agree within
// BF16 tolerance, and two GPU runs give bit-identical losses under --deterministic-mode (cuDNN
// attention's backward without atomics; every other kernel is deterministic in any mode: no
// atomics in reductions, sorted embedding gradients, cuBLASLt with a fixed algorithm per shape).
// Head dim 32 in BF16: the GPU runs cuDNN's fused attention. The same for a --qk-layernorm model.
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

// --qk-layernorm on the GPU: each query and key head normalized (the op set's norm kernels on rows
// of kv_channels, copied out of and back into qkv by copy_columns) before RoPE, GQA, LayerNorm
// with zero-centred weights; 20 BF16 steps against the CPU backend.
std::vector<double> qk_layernorm_losses(const char* device) {
  return testing_support::train_losses(
      {"t", "--device", device, "--bf16", "--mock-data", "--vocab-size", "1000", "--num-layers", "2",
       "--hidden-size", "128", "--num-attention-heads", "4", "--group-query-attention", "--num-query-groups", "2",
       "--position-embedding-type", "rope", "--qk-layernorm", "--apply-layernorm-1p", "--seq-length", "64",
       "--max-position-embeddings", "64", "--micro-batch-size", "4", "--global-batch-size", "16", "--train-iters", "20",
       "--lr", "1e-3", "--lr-warmup-iters", "5", "--eval-iters", "0", "--deterministic-mode"},
      20);
}

TEST(GpuTraining, QkLayerNormTracksTheCpuBackend) {
  GPT_REQUIRE_GPU();
  const std::vector<double> cpu = qk_layernorm_losses("cpu");
  const std::vector<double> gpu = qk_layernorm_losses("cuda");
  ASSERT_EQ(cpu.size(), 20u);
  ASSERT_EQ(gpu.size(), 20u);
  double worst = 0.0;
  for (size_t i = 0; i < cpu.size(); ++i) worst = std::max(worst, std::fabs(gpu[i] - cpu[i]) / cpu[i]);
  std::printf("--qk-layernorm GPU vs CPU, 20 BF16 steps: max relative loss difference %.3e\n", worst);
  EXPECT_LE(worst, 2e-2);
  EXPECT_LT(gpu.back(), gpu.front());
}

}  // namespace
}  // namespace gpt
