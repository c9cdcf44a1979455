#include <vector>

#include "gtest/gtest.h"
#include "train/trainer.h"

namespace gpt {
namespace {

std::vector<double> train_losses(std::vector<std::string> flags, int steps) {
  absl::StatusOr<Arguments> parsed = parse_arguments(flags);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  Arguments args = *parsed;
  EXPECT_TRUE(validate_arguments(args).ok());
  EXPECT_TRUE(validate_for_world(args, 1).ok());
  std::unique_ptr<ProcessGrid> grid = ProcessGrid::single();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::create(args, *grid);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  std::vector<double> losses;
  for (int i = 0; i < steps; ++i) losses.push_back((*trainer)->train_step().loss);
  EXPECT_EQ((*trainer)->consumed_samples(), steps * args.global_batch_size);
  return losses;
}

std::vector<std::string> flags(const char* micro_batch, bool bf16 = false) {
  std::vector<std::string> f = {"t", "--mock-data", "--vocab-size", "97", "--num-layers", "2", "--hidden-size", "32",
                                "--num-attention-heads", "4", "--seq-length", "16", "--max-position-embeddings", "16",
                                "--micro-batch-size", micro_batch, "--global-batch-size", "8", "--train-iters", "6",
                                "--lr", "3e-3"};
  if (bf16) f.push_back("--bf16");
  return f;
}

TEST(Trainer, RunsAreBitwiseDeterministic) {
  EXPECT_EQ(train_losses(flags("2"), 4), train_losses(flags("2"), 4));
  EXPECT_EQ(train_losses(flags("2", true), 4), train_losses(flags("2", true), 4));
}

TEST(Trainer, GradientAccumulationMatchesOneLargeMicrobatch) {
  // 4 microbatches of 2 and 1 microbatch of 8 see the same samples and the same mean loss.
  const std::vector<double> accumulated = train_losses(flags("2"), 6);
  const std::vector<double> single = train_losses(flags("8"), 6);
  for (size_t i = 0; i < single.size(); ++i) EXPECT_NEAR(accumulated[i], single[i], 1e-5 * single[i]);
  EXPECT_LT(single.back(), single.front());
}

TEST(Trainer, Bf16TracksFp32) {
  const std::vector<double> fp32 = train_losses(flags("4"), 6);
  const std::vector<double> bf16 = train_losses(flags("4", true), 6);
  for (size_t i = 0; i < fp32.size(); ++i) EXPECT_NEAR(bf16[i], fp32[i], 2e-2 * fp32[i]);
}

}  // namespace
}  // namespace gpt
