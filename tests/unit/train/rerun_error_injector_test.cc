#include "train/resilience/rerun_error_injector.h"

#include "gtest/gtest.h"

namespace gpt {
namespace {

// The rate's meaning: one validation call in `rate` is rejected (Megatron's
// (randint(0, rate - 1) + rank) % rate == 0), on every rank, independently of the call's position.
TEST(RerunErrorInjector, RejectsOneCallInRate) {
  for (int rank : {0, 1, 7}) {
    RerunErrorInjector injector(100, "transient_error", 1234, rank);
    int64_t injected = 0;
    // 200000 calls, a transient injection cleared by its first rerun each time: 2000 expected
    // (binomial standard deviation 44.5).
    for (int64_t iteration = 2; iteration < 20002; ++iteration) {
      for (int64_t call = 0; call < 10; ++call) {
        if (injector.maybe_inject(iteration, call)) {
          ++injected;
          EXPECT_TRUE(injector.first_rerun_differs(false));
          EXPECT_EQ(injector.pending(), "");
        }
      }
    }
    EXPECT_GT(injected, 1800) << rank;
    EXPECT_LT(injected, 2200) << rank;
  }
  RerunErrorInjector every(1, "transient_error", 1234, 3);
  EXPECT_TRUE(every.maybe_inject(5, 0));
  RerunErrorInjector none(0, "transient_error", 1234, 0);
  for (int64_t call = 0; call < 1000; ++call) EXPECT_FALSE(none.maybe_inject(2, call));
}

// Megatron's maybe_miscompare: the type decides both comparisons, whatever the results were.
TEST(RerunErrorInjector, TypeDecidesTheComparisons) {
  RerunErrorInjector transient(1, "transient_error", 1, 0);
  ASSERT_TRUE(transient.maybe_inject(2, 0));
  EXPECT_TRUE(transient.first_rerun_differs(false));
  EXPECT_FALSE(transient.first_rerun_differs(false));  // done with: the real comparison again
  EXPECT_TRUE(transient.first_rerun_differs(true));

  RerunErrorInjector persistent(1, "persistent_error", 1, 0);
  ASSERT_TRUE(persistent.maybe_inject(2, 0));
  EXPECT_FALSE(persistent.first_rerun_differs(true));
  EXPECT_EQ(persistent.pending(), "persistent_error");
  EXPECT_FALSE(persistent.maybe_inject(3, 0));  // one injection at a time
  EXPECT_TRUE(persistent.second_rerun_differs(false));
  EXPECT_EQ(persistent.pending(), "");
  EXPECT_TRUE(persistent.maybe_inject(3, 0));

  RerunErrorInjector correct(1, "correct_result", 1, 0);
  ASSERT_TRUE(correct.maybe_inject(2, 0));
  EXPECT_FALSE(correct.first_rerun_differs(true));
  EXPECT_FALSE(correct.second_rerun_differs(true));

  // The second stage restores the pending injection from the checkpoint.
  RerunErrorInjector resumed(0, "transient_error", 1, 0);
  resumed.set_pending("persistent_error");
  EXPECT_TRUE(resumed.second_rerun_differs(false));
  EXPECT_FALSE(resumed.second_rerun_differs(false));
}

}  // namespace
}  // namespace gpt
