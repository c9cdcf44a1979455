#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "gtest/gtest.h"
#include "support/trainer_support.h"
#include "train/trainer.h"

namespace gpt {
namespace {
using testing_support::make_trainer;
using testing_support::train_losses;

std::vector<std::string> flags(const char* micro_batch, bool bf16 = false) {
  std::vector<std::string> f = {"t", "--device", "cpu", "--mock-data", "--vocab-size", "97", "--num-layers", "2", "--hidden-size", "32",
                                "--num-attention-heads", "4", "--seq-length", "16", "--max-position-embeddings", "16",
                                "--micro-batch-size", micro_batch, "--global-batch-size", "8", "--train-iters", "6",
                                "--lr", "3e-3"};
  if (bf16) f.push_back("--bf16");
  return f;
}

TEST(Trainer, CountsConsumedSamples) {
  std::unique_ptr<ProcessGrid> grid;
  std::unique_ptr<Trainer> trainer = make_trainer(flags("2"), grid);
  for (int i = 0; i < 3; ++i) trainer->train_step();
  EXPECT_EQ(trainer->consumed_samples(), 3 * 8);
  EXPECT_EQ(trainer->iteration(), 3);
}

TEST(Trainer, RunsAreBitwiseDeterministic) {
  const std::vector<double> first = train_losses(flags("2"), 4);
  ASSERT_EQ(first.size(), 4u);
  EXPECT_EQ(first, train_losses(flags("2"), 4));
  EXPECT_EQ(train_losses(flags("2", true), 4), train_losses(flags("2", true), 4));
}

TEST(Trainer, GradientAccumulationMatchesOneLargeMicrobatch) {
  // 4 microbatches of 2 and 1 microbatch of 8 see the same samples and the same mean loss.
  const std::vector<double> accumulated = train_losses(flags("2"), 6);
  const std::vector<double> single = train_losses(flags("8"), 6);
  ASSERT_EQ(accumulated.size(), 6u);
  ASSERT_EQ(single.size(), 6u);
  for (size_t i = 0; i < single.size(); ++i) EXPECT_NEAR(accumulated[i], single[i], 1e-5 * single[i]);
  EXPECT_LT(single.back(), single.front());
}

TEST(Trainer, Bf16TracksFp32) {
  const std::vector<double> fp32 = train_losses(flags("4"), 6);
  const std::vector<double> bf16 = train_losses(flags("4", true), 6);
  ASSERT_EQ(fp32.size(), 6u);
  ASSERT_EQ(bf16.size(), 6u);
  for (size_t i = 0; i < fp32.size(); ++i) EXPECT_NEAR(bf16[i], fp32[i], 2e-2 * fp32[i]);
}

TEST(Trainer, ResumedDataPositionReadsTheSamplesAnUninterruptedRunReads) {
  std::vector<std::string> f = flags("2");
  f.insert(f.end(), {"--eval-iters", "2", "--eval-interval", "2"});
  std::unique_ptr<ProcessGrid> grid_a, grid_b;
  std::unique_ptr<Trainer> a = make_trainer(f, grid_a);
  for (int i = 0; i < 3; ++i) a->train_step();
  a->evaluate(Split::kValid);
  const Trainer::DataPosition position = a->data_position();
  EXPECT_EQ(position.consumed_train_samples, 24);
  EXPECT_EQ(position.consumed_valid_samples, 16);
  // A fresh trainer told where the first one stands reads the same next samples.
  std::unique_ptr<Trainer> b = make_trainer(f, grid_b);
  b->set_data_position(position, 3);
  for (int64_t j = 0; j < 4; ++j) {
    a->evaluate_microbatch(j);
    const std::vector<int32_t> expected = a->current_microbatch().tokens;
    b->evaluate_microbatch(j);
    EXPECT_EQ(b->current_microbatch().tokens, expected) << "train microbatch " << j;
  }
  a->evaluate(Split::kValid);
  const std::vector<int32_t> expected_valid = a->current_microbatch().tokens;
  b->evaluate(Split::kValid);
  EXPECT_EQ(b->current_microbatch().tokens, expected_valid);
  EXPECT_EQ(b->data_position().consumed_valid_samples, 32);
  // And a trainer that did not move reads different samples.
  std::unique_ptr<ProcessGrid> grid_c;
  std::unique_ptr<Trainer> c = make_trainer(f, grid_c);
  c->evaluate_microbatch(0);
  a->evaluate_microbatch(0);
  EXPECT_NE(c->current_microbatch().tokens, a->current_microbatch().tokens);
}

// A non-finite gradient skips the update (parameters and optimizer untouched), is counted as
// skipped, and the parameter holding it is named.
TEST(Trainer, NonFiniteGradientSkipsTheStepAndNamesTheParameter) {
  std::unique_ptr<ProcessGrid> grid;
  std::unique_ptr<Trainer> trainer = make_trainer(flags("2"), grid);
  trainer->train_step();
  trainer->compute_gradients();
  Param& poisoned = trainer->params().get("decoder.layers.1.mlp.linear_fc1.weight");
  poisoned.grad.data_as<float>()[5] = std::numeric_limits<float>::quiet_NaN();
  const std::vector<float> before(trainer->params().flat_values().data_as<float>(),
                                  trainer->params().flat_values().data_as<float>() +
                                      trainer->params().flat_values().numel());
  const int64_t steps_before = trainer->optimizer().steps_taken();
  testing::internal::CaptureStderr();
  const StepResult result = trainer->apply_update();
  const std::string warning = testing::internal::GetCapturedStderr();
  EXPECT_TRUE(result.skipped);
  EXPECT_FALSE(std::isfinite(result.grad_norm));
  EXPECT_TRUE(std::isfinite(result.loss));
  EXPECT_EQ(trainer->optimizer().steps_taken(), steps_before);
  EXPECT_EQ(0, std::memcmp(before.data(), trainer->params().flat_values().data(), before.size() * sizeof(float)));
  EXPECT_NE(warning.find("decoder.layers.1.mlp.linear_fc1.weight"), std::string::npos) << warning;
  // The next step trains again.
  EXPECT_FALSE(trainer->train_step().skipped);
}

// Megatron's --check-for-nan-in-loss-and-grad: a non-finite loss or gradient norm is an error
// naming the iteration and the value; a finite step passes.
TEST(Trainer, NonFiniteLossOrNormIsAnErrorNamingTheIteration) {
  std::unique_ptr<ProcessGrid> grid;
  std::unique_ptr<Trainer> trainer = make_trainer(flags("2"), grid);
  const StepResult step = trainer->train_step();
  EXPECT_TRUE(trainer->check_finite(step).ok());
  StepResult bad_loss = step;
  bad_loss.loss = std::numeric_limits<double>::quiet_NaN();
  const absl::Status loss_status = trainer->check_finite(bad_loss);
  ASSERT_FALSE(loss_status.ok());
  EXPECT_NE(loss_status.message().find("iteration 1: the loss is nan"), std::string::npos) << loss_status;
  EXPECT_NE(loss_status.message().find("--no-check-for-nan-in-loss-and-grad"), std::string::npos) << loss_status;
  StepResult bad_norm = step;
  bad_norm.grad_norm = std::numeric_limits<double>::infinity();
  const absl::Status norm_status = trainer->check_finite(bad_norm);
  ASSERT_FALSE(norm_status.ok());
  EXPECT_NE(norm_status.message().find("iteration 1: the gradient norm is inf"), std::string::npos) << norm_status;
}

}  // namespace
}  // namespace gpt
