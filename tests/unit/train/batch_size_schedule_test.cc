// Megatron's batch-size calculators on the values of its own documentation and launch scripts:
// the GPT-3 example's step schedule (thresholds in tokens, B suffixes, --seq-length 2048) and the
// ramp-up docstring's [16 8 300000] to 1024 (126 increments of 300000 / 126 samples).
#include "train/batch_size_schedule.h"

#include "gtest/gtest.h"

namespace gpt {
namespace {

TEST(BatchSizeSchedule, Gpt3ExampleStepsInTokens) {
  absl::StatusOr<BatchSizeSchedule> s =
      BatchSizeSchedule::steps("0:16 2.4B:320 4.8B:624 7.2B:928 9.6B:1232 12B:1536", 2048);
  ASSERT_TRUE(s.ok()) << s.status();
  // int(2.4 * 1e9) // 2048 = 1171875 samples, and so on.
  EXPECT_EQ(s->batch_size_at(0), 16);
  EXPECT_EQ(s->batch_size_at(1171874), 16);
  EXPECT_EQ(s->batch_size_at(1171875), 320);
  EXPECT_EQ(s->batch_size_at(2343750), 624);
  EXPECT_EQ(s->batch_size_at(3515625), 928);
  EXPECT_EQ(s->batch_size_at(4687500), 1232);
  EXPECT_EQ(s->batch_size_at(5859374), 1232);
  EXPECT_EQ(s->batch_size_at(5859375), 1536);
  EXPECT_EQ(s->batch_sizes(), (std::vector<int64_t>{16, 320, 624, 928, 1232, 1536}));
  // update_train_iters with a step schedule: until the samples are reached, the last batch whole.
  EXPECT_EQ(s->iterations_for_samples(16), 1);
  EXPECT_EQ(s->iterations_for_samples(17), 2);
  EXPECT_EQ(s->iterations_for_samples(1171875 + 320), 1171875 / 16 + 1 + 1);
}

TEST(BatchSizeSchedule, StepsParseAsMegatron) {
  // Commas and spaces, lower-case suffixes, unsorted entries (sorted by threshold).
  absl::StatusOr<BatchSizeSchedule> s = BatchSizeSchedule::steps(" 1k:8,0:4  2K:1.6e1 ", 10);
  ASSERT_TRUE(s.ok()) << s.status();
  EXPECT_EQ(s->batch_size_at(99), 4);
  EXPECT_EQ(s->batch_size_at(100), 8);
  EXPECT_EQ(s->batch_size_at(200), 16);
  EXPECT_FALSE(BatchSizeSchedule::steps("", 10).ok());
  EXPECT_FALSE(BatchSizeSchedule::steps("0:4 inf:8", 10).ok());
  EXPECT_FALSE(BatchSizeSchedule::steps("0:4 10:8", 20).ok());  // 10 // 20 = 0 twice: not increasing
}

TEST(BatchSizeSchedule, RampUpAsMegatronsDocstring) {
  absl::StatusOr<BatchSizeSchedule> s = BatchSizeSchedule::ramp_up(16, 8, 300000, 1024);
  ASSERT_TRUE(s.ok()) << s.status();
  // 300000 / 126 = 2380.95... samples per increment.
  EXPECT_EQ(s->batch_size_at(0), 16);
  EXPECT_EQ(s->batch_size_at(2380), 16);
  EXPECT_EQ(s->batch_size_at(2381), 24);
  EXPECT_EQ(s->batch_size_at(300000), 1024);
  EXPECT_EQ(s->batch_size_at(299999), 16 + 125 * 8);
  EXPECT_EQ(s->batch_sizes().size(), 127u);
  // Ramp iterations while at most 300000 samples were consumed, then whole batches of 1024.
  int64_t iterations = 0, consumed = 0;
  while (consumed <= 300000) consumed += s->batch_size_at(consumed), ++iterations;
  EXPECT_EQ(s->iterations_for_samples(1000000), iterations + (1000000 - consumed) / 1024);
  EXPECT_EQ(s->samples_after(0, iterations), consumed);
  EXPECT_FALSE(BatchSizeSchedule::ramp_up(16, 16, 100, 16).ok());  // nothing to ramp: Megatron divides by 0
  EXPECT_FALSE(BatchSizeSchedule::ramp_up(16, 10, 100, 1024).ok());  // 1008 not a multiple of 10
}

}  // namespace
}  // namespace gpt
