#include <set>
#include <vector>

#include "data/microbatch.h"
#include "data/mock_dataset.h"
#include "gtest/gtest.h"

namespace gpt {
namespace {

TEST(MockDataset, SamplesAreDeterministicStructuredAndInVocabulary) {
  MockDataset data(1234, 100, 16);
  std::vector<int32_t> a(17), b(17), c(17);
  data.sample(5, a);
  data.sample(5, b);
  data.sample(6, c);
  EXPECT_EQ(a, b);
  EXPECT_NE(a, c);
  MockDataset other_seed(99, 100, 16);
  other_seed.sample(5, b);
  EXPECT_NE(a, b);
  // Within a document each step is +1, +2 or +3 modulo 99, and 99 ends documents.
  for (int64_t index = 0; index < 200; ++index) {
    data.sample(index, a);
    for (size_t i = 0; i < a.size(); ++i) {
      ASSERT_GE(a[i], 0);
      ASSERT_LT(a[i], 100);
    }
    for (size_t i = 1; i < a.size(); ++i) {
      if (a[i] == 99 || a[i - 1] == 99) continue;
      const int step = ((a[i] - a[i - 1]) % 99 + 99) % 99;
      ASSERT_TRUE(step >= 1 && step <= 3) << "sample " << index << " position " << i;
    }
  }
}

TEST(Microbatch, FollowsMegatronsSamplerAndShiftsTargets) {
  // gbs 12 = mbs 2 x dp 3 x 2 microbatches; rank 1's second microbatch starts at
  // consumed + 1 * (2 * 3) + 1 * 2.
  EXPECT_EQ(first_sample_of_microbatch(24, 1, 2, 3, 1), 24 + 6 + 2);
  // Over all ranks and microbatches of an iteration every sample is read exactly once.
  std::set<int64_t> seen;
  for (int64_t rank = 0; rank < 3; ++rank) {
    for (int64_t j = 0; j < 2; ++j) {
      for (int64_t b = 0; b < 2; ++b) seen.insert(first_sample_of_microbatch(24, j, 2, 3, rank) + b);
    }
  }
  EXPECT_EQ(seen.size(), 12u);
  EXPECT_EQ(*seen.begin(), 24);
  EXPECT_EQ(*seen.rbegin(), 35);

  MockDataset data(7, 50, 8);
  Microbatch batch;
  load_microbatch(data, 0, 0, 2, 1, 0, batch);
  std::vector<int32_t> sample(9);
  data.sample(1, sample);
  for (int i = 0; i < 8; ++i) {
    EXPECT_EQ(batch.tokens[8 + i], sample[i]);
    EXPECT_EQ(batch.targets[8 + i], sample[i + 1]);
  }
}

}  // namespace
}  // namespace gpt
