// Tests that drive the trainer directly: a one-process trainer from a pretrain_gpt command line.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "train/trainer.h"

namespace gpt::testing_support {

// Parses and validates `flags` (argv[0] first) for a world of one; `grid` receives the grid,
// which must outlive the trainer. Fails the test on any error.
inline std::unique_ptr<Trainer> make_trainer(const std::vector<std::string>& flags, std::unique_ptr<ProcessGrid>& grid) {
  absl::StatusOr<Arguments> parsed = parse_arguments(flags);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  if (!parsed.ok()) return nullptr;
  Arguments args = *parsed;
  EXPECT_TRUE(prepare_arguments(args).ok());
  EXPECT_TRUE(prepare_for_world(args, 1).ok());
  grid = ProcessGrid::single();
  absl::StatusOr<std::unique_ptr<Trainer>> trainer = Trainer::create(args, *grid);
  EXPECT_TRUE(trainer.ok()) << trainer.status();
  return trainer.ok() ? *std::move(trainer) : nullptr;
}

// The losses of `steps` training steps.
inline std::vector<double> train_losses(const std::vector<std::string>& flags, int steps) {
  std::unique_ptr<ProcessGrid> grid;
  std::unique_ptr<Trainer> trainer = make_trainer(flags, grid);
  std::vector<double> losses;
  for (int i = 0; trainer && i < steps; ++i) losses.push_back(trainer->train_step().loss);
  return losses;
}

}  // namespace gpt::testing_support
