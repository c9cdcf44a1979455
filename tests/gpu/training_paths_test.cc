// The training paths written since the last GPU run, one rank on the GPU against the CPU backend
// (same flags, same seed), or against another GPU path that must give the same bits:
//   - FP16 with a constant loss scale (the FP16 GEMMs, casts and unscaling) and with Megatron's
//     dynamic scaler from 2^32 (the device-side overflow count and the skipped updates);
//   - ZeRO-3 (--use-megatron-fsdp, parameters gathered unit by unit into working buffers, with
//     prefetch) against ZeRO-2 (optim_grads): the gathers copy exact values, so bit for bit;
//   - optimizer state half on the host, its copies pipelined on their own stream
//     (--overlap-cpu-optimizer-d2h-h2d) against the same without the pipeline (bit for bit: the
//     same op on the same values) and against the CPU backend;
//   - none of these steps waits for the whole device (only for its own streams);
//   - q/k norms (RMSNorm) on heads of kv_channels = 16, GQA, SwiGLU;
//   - FP8, which has no GPU path yet: refused with its reason.
// Tolerances by precision: BF16 and FP16 losses within 2e-2 relative of the CPU's.
#include <cmath>
#include <cstdio>
#include <string>
#include <vector>

#include "core/cuda_runtime.h"
#include "gmock/gmock.h"
#include "gpu/gpu_test_util.h"
#include "support/trainer_support.h"

namespace gpt {
namespace {

struct TrainedRun {
  std::vector<double> losses, grad_norms;
  std::vector<bool> overflows;
  // Whole-device waits (cudaDeviceSynchronize) after the first step, which may still size lazily
  // allocated workspaces: a training step waits for its own streams only.
  size_t device_waits = 0;
};

const std::vector<std::string> kModel = {
    "t", "--mock-data", "--vocab-size", "1000", "--num-layers", "2", "--hidden-size", "128", "--seq-length", "64",
    "--max-position-embeddings", "64", "--micro-batch-size", "4", "--global-batch-size", "16", "--lr", "1e-3",
    "--lr-warmup-iters", "5", "--eval-iters", "0", "--deterministic-mode"};

TrainedRun train(const char* device, const std::vector<std::string>& flags, int steps) {
  std::vector<std::string> all = kModel;
  all.insert(all.end(), {"--device", device, "--train-iters", std::to_string(steps)});
  all.insert(all.end(), flags.begin(), flags.end());
  std::unique_ptr<ProcessGrid> grid;
  std::unique_ptr<Trainer> trainer = testing_support::make_trainer(all, grid);
  TrainedRun run;
  size_t waits_after_first = 0;
  for (int i = 0; trainer && i < steps; ++i) {
    const StepResult step = trainer->train_step();
    run.losses.push_back(step.loss);
    run.grad_norms.push_back(step.grad_norm);
    run.overflows.push_back(step.overflow);
    if (i == 0) waits_after_first = cuda::device_synchronizations();
  }
  run.device_waits = cuda::device_synchronizations() - waits_after_first;
  return run;
}

double worst_relative(const std::vector<double>& ours, const std::vector<double>& reference) {
  double worst = ours.size() == reference.size() ? 0.0 : INFINITY;
  for (size_t i = 0; i < ours.size() && i < reference.size(); ++i) {
    worst = std::max(worst, std::fabs(ours[i] - reference[i]) / std::fabs(reference[i]));
  }
  return worst;
}

const std::vector<std::string> kGpt = {"--num-attention-heads", "4"};

std::vector<std::string> with(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

TEST(GpuTrainingPaths, Fp16ConstantLossScaleTracksTheCpuBackend) {
  GPT_REQUIRE_GPU();
  const std::vector<std::string> flags = with(kGpt, {"--fp16", "--loss-scale", "4096"});
  const TrainedRun cpu = train("cpu", flags, 20), gpu = train("cuda", flags, 20);
  ASSERT_EQ(gpu.losses.size(), 20u);
  const double worst = worst_relative(gpu.losses, cpu.losses);
  std::printf("FP16 (loss scale 4096) GPU vs CPU, 20 steps: max relative loss difference %.3e\n", worst);
  EXPECT_LE(worst, 2e-2);
  for (size_t i = 0; i < gpu.overflows.size(); ++i) EXPECT_FALSE(gpu.overflows[i] || cpu.overflows[i]) << "step " << i;
  EXPECT_LT(gpu.losses.back(), gpu.losses.front());
}

// From 2^32 the scaled gradients overflow FP16 on the first steps (on the CPU backend the first
// clean step comes at 2^24, so 2^32..2^25, steps 1-8, overflow by a factor of two or more on
// either backend); each overflow halves the scale (hysteresis spent after the first) until the
// updates go through.
TEST(GpuTrainingPaths, Fp16DynamicLossScalerSkipsTheOverflowingSteps) {
  GPT_REQUIRE_GPU();
  const std::vector<std::string> flags = with(kGpt, {"--fp16"});
  const TrainedRun cpu = train("cpu", flags, 14), gpu = train("cuda", flags, 14);
  ASSERT_EQ(gpu.losses.size(), 14u);
  int gpu_clean = 0;
  for (size_t i = 0; i < 14; ++i) {
    if (i < 8) {
      EXPECT_TRUE(cpu.overflows[i]) << "CPU step " << i + 1;
      EXPECT_TRUE(gpu.overflows[i]) << "GPU step " << i + 1 << " did not see the overflow";
      EXPECT_TRUE(std::isnan(gpu.grad_norms[i])) << "an overflowing step has no gradient norm";
    }
    gpu_clean += gpu.overflows[i] ? 0 : 1;
  }
  EXPECT_GE(gpu_clean, 2) << "the GPU never got past the overflows";
  EXPECT_EQ(gpu.device_waits, 0u) << "the overflow check waited for the whole device";
  const double worst = worst_relative(gpu.losses, cpu.losses);
  std::printf("FP16 dynamic scaler GPU vs CPU, 14 steps: %d clean on the GPU, max relative loss difference %.3e\n",
              gpu_clean, worst);
  EXPECT_LE(worst, 2e-2);
}

TEST(GpuTrainingPaths, ZeroThreeGathersGiveZeroTwosBits) {
  GPT_REQUIRE_GPU();
  const TrainedRun zero2 = train(
      "cuda", with(kGpt, {"--bf16", "--use-megatron-fsdp", "--data-parallel-sharding-strategy", "optim_grads"}), 10);
  const TrainedRun zero3 = train("cuda", with(kGpt, {"--bf16", "--use-megatron-fsdp", "--overlap-param-gather"}), 10);
  const TrainedRun cpu = train("cpu", with(kGpt, {"--bf16", "--use-megatron-fsdp"}), 10);
  ASSERT_EQ(zero3.losses.size(), 10u);
  EXPECT_EQ(zero3.losses, zero2.losses);
  EXPECT_EQ(zero3.grad_norms, zero2.grad_norms);
  EXPECT_EQ(zero3.device_waits, 0u) << "a ZeRO-3 step waited for the whole device";
  const double worst = worst_relative(zero3.losses, cpu.losses);
  std::printf("ZeRO-3 GPU vs CPU, 10 BF16 steps: max relative loss difference %.3e\n", worst);
  EXPECT_LE(worst, 2e-2);
}

TEST(GpuTrainingPaths, OffloadedOptimizerPipelinedCopiesGiveTheSameBits) {
  GPT_REQUIRE_GPU();
  const std::vector<std::string> offload =
      with(kGpt, {"--bf16", "--use-distributed-optimizer", "--optimizer-cpu-offload", "--use-precision-aware-optimizer",
                  "--optimizer-offload-fraction", "0.5"});
  const TrainedRun serial = train("cuda", offload, 10);
  const TrainedRun pipelined = train("cuda", with(offload, {"--overlap-cpu-optimizer-d2h-h2d"}), 10);
  const TrainedRun device = train("cuda", with(kGpt, {"--bf16", "--use-distributed-optimizer"}), 10);
  const TrainedRun cpu = train("cpu", offload, 10);
  ASSERT_EQ(pipelined.losses.size(), 10u);
  EXPECT_EQ(pipelined.losses, serial.losses);
  EXPECT_EQ(pipelined.grad_norms, serial.grad_norms);
  EXPECT_EQ(pipelined.device_waits, 0u) << "the pipelined copies waited for the whole device";
  // The host half steps with the CPU's AdamW, the device half with the CUDA one: rounding apart.
  const double against_device = worst_relative(pipelined.losses, device.losses);
  const double against_cpu = worst_relative(pipelined.losses, cpu.losses);
  std::printf("offload 0.5 pipelined, 10 BF16 steps: vs the device optimizer %.3e, vs the CPU backend %.3e\n",
              against_device, against_cpu);
  EXPECT_LE(against_device, 2e-2);
  EXPECT_LE(against_cpu, 2e-2);
}

TEST(GpuTrainingPaths, QkRmsNormOnSixteenWideHeadsTracksTheCpuBackend) {
  GPT_REQUIRE_GPU();
  const std::vector<std::string> flags = {
      "--bf16", "--num-attention-heads", "8", "--group-query-attention", "--num-query-groups", "2",
      "--position-embedding-type", "rope", "--normalization", "RMSNorm", "--swiglu", "--disable-bias-linear",
      "--qk-layernorm", "--untie-embeddings-and-output-weights"};
  const TrainedRun cpu = train("cpu", flags, 15), gpu = train("cuda", flags, 15);
  ASSERT_EQ(gpu.losses.size(), 15u);
  const double worst = worst_relative(gpu.losses, cpu.losses);
  std::printf("--qk-layernorm RMSNorm, kv_channels 16, GPU vs CPU, 15 BF16 steps: max relative loss difference %.3e\n",
              worst);
  EXPECT_LE(worst, 2e-2);
  EXPECT_LT(gpu.losses.back(), gpu.losses.front());
}

// FP8 GEMMs exist only as the CPU backend's emulation: on the GPU --fp8-format is refused before
// any work, naming the flag and the reason (a flag Megatron accepts is either honoured or refused).
TEST(GpuTrainingPaths, Fp8IsRefusedOnTheGpuWithItsReason) {
  GPT_REQUIRE_GPU();
  std::vector<std::string> flags = with(kModel, with(kGpt, {"--bf16", "--device", "cuda", "--train-iters", "2",
                                                            "--fp8-format", "hybrid"}));
  absl::StatusOr<Arguments> parsed = parse_arguments(flags);
  ASSERT_TRUE(parsed.ok()) << parsed.status();
  Arguments args = *parsed;
  ASSERT_TRUE(prepare_arguments(args).ok());
  ASSERT_TRUE(prepare_for_world(args, 1).ok());
  std::unique_ptr<ProcessGrid> grid = ProcessGrid::single();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::create(args, *grid);
  ASSERT_FALSE(trainer.ok());
  EXPECT_EQ(trainer.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_THAT(std::string(trainer.status().message()),
              ::testing::HasSubstr("--fp8-format: FP8 GEMMs are emulated on the CPU backend only"));
}

}  // namespace
}  // namespace gpt
