#include <cmath>
#include <vector>

#include "core/arena.h"
#include "gtest/gtest.h"
#include "optim/adamw.h"
#include "optim/grad_clip.h"
#include "optim/lr_schedule.h"
#include "parallel/comm/self_communicator.h"

namespace gpt {
namespace {

TEST(LrSchedule, MegatronWarmupAndDecayInSamples) {
  // warmup 2 iterations, decay 10 iterations, gbs 8: steps counted in samples.
  LrScheduleConfig c{.max_lr = 1.0, .min_lr = 0.1, .warmup_steps = 16, .decay_steps = 80, .style = LrDecayStyle::kLinear};
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 0), 0.0);    // first update of a warmed-up run uses lr 0
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 8), 0.5);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 16), 1.0);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 48), 0.1 + 0.5 * 0.9);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 80), 0.1);
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 800), 0.1);
  c.style = LrDecayStyle::kCosine;
  EXPECT_NEAR(learning_rate_at(c, 48), 0.1 + 0.5 * (std::cos(M_PI * 0.5) + 1.0) * 0.9, 1e-15);
  EXPECT_NEAR(learning_rate_at(c, 80), 0.1, 1e-15);
  c.style = LrDecayStyle::kConstant;
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 50), 1.0);
  c.warmup_steps = 0;
  c.style = LrDecayStyle::kLinear;
  EXPECT_DOUBLE_EQ(learning_rate_at(c, 0), 1.0);    // no warmup: the first update uses max lr
}

TEST(GradClip, MegatronCoefficient) {
  EXPECT_FLOAT_EQ(clip_coefficient(2.0, 1.0), static_cast<float>(1.0 / (2.0 + 1e-6)));
  EXPECT_FLOAT_EQ(clip_coefficient(0.5, 1.0), 1.0f);
  EXPECT_FLOAT_EQ(clip_coefficient(100.0, 0.0), 1.0f);
}

ParamSpec spec(const char* name, std::vector<int64_t> shape) {
  ParamSpec s;
  s.name = name;
  s.global_shape = std::move(shape);
  s.weight_decay = s.global_shape.size() > 1;
  s.split = TensorSplit::kReplicated;
  return s;
}

TEST(AdamW, DecaysOnlyMatricesAndKeepsBf16CopyOfMaster) {
  Context ctx = Context::cpu(1);
  Arena arena(Device::kCpu, "test");
  ParamStore store({spec("w", {2, 3}), spec("b", {3})}, 0, 1, DType::kBFloat16, arena);
  Param& w = store.get("w");
  Param& b = store.get("b");
  for (int i = 0; i < 6; ++i) w.value.data_as<bf16>()[i] = bf16(0.5f + i);
  for (int i = 0; i < 3; ++i) b.value.data_as<bf16>()[i] = bf16(-1.0f + i);
  AdamW adam(ctx, store, {.beta1 = 0.9f, .beta2 = 0.99f, .epsilon = 1e-8f, .weight_decay = 0.5f}, arena);
  // Zero gradients: the only change is weight decay, p *= 1 - lr * wd, on the matrix alone.
  adam.step(ctx, 0.1f, 1.0f);
  for (int i = 0; i < 6; ++i) {
    const float master = adam.master().data_as<float>()[w.flat_offset + i];
    EXPECT_FLOAT_EQ(master, (0.5f + i) * (1.0f - 0.05f));
    EXPECT_EQ(w.value.data_as<bf16>()[i].bits, bf16(master).bits);
  }
  for (int i = 0; i < 3; ++i) EXPECT_FLOAT_EQ(b.value.data_as<bf16>()[i].to_float(), -1.0f + i);
  EXPECT_EQ(adam.steps_taken(), 1);
}

TEST(GradNorm, CountsTensorParallelDuplicatesOnce) {
  Context ctx = Context::cpu(1);
  Arena arena(Device::kCpu, "test");
  ParamSpec split = spec("split", {4, 2});
  split.split = TensorSplit::kRows;
  // TP rank 1 of 2: the replicated parameter is a duplicate and must not count.
  ParamStore store({split, spec("replicated", {3})}, 1, 2, DType::kFloat32, arena);
  for (int i = 0; i < 4; ++i) store.get("split").grad.data_as<float>()[i] = 1.0f;
  for (int i = 0; i < 3; ++i) store.get("replicated").grad.data_as<float>()[i] = 10.0f;
  Tensor scratch = arena.allocate(DType::kFloat32, {1});
  EXPECT_DOUBLE_EQ(global_grad_norm(ctx, store, scratch, {}), 2.0);
}

}  // namespace
}  // namespace gpt
