// The caller's side of an asynchronous collective (CollectiveHandle), independent of any backend:
// wait() reaches the operation exactly once, and a handle dropped or overwritten while its
// operation is in flight is fatal, naming the operation.
#include "gtest/gtest.h"
#include "parallel/comm/communicator.h"

namespace gpt {
namespace {

class CountingPending final : public PendingCollective {
 public:
  explicit CountingPending(int* waits) : waits_(waits) {}
  void wait(Context&) override { ++*waits_; }
  std::string describe() const override { return "all_reduce on group 'test'"; }

 private:
  int* waits_;
};

TEST(CollectiveHandle, WaitReachesTheOperationOnce) {
  Context ctx = Context::cpu(1);
  int waits = 0;
  CollectiveHandle handle(std::make_unique<CountingPending>(&waits));
  EXPECT_TRUE(handle.pending());
  CollectiveHandle moved = std::move(handle);
  EXPECT_FALSE(handle.pending());  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  handle.wait(ctx);
  EXPECT_EQ(waits, 0);
  moved.wait(ctx);
  moved.wait(ctx);
  EXPECT_EQ(waits, 1);
  EXPECT_FALSE(moved.pending());
  moved = CollectiveHandle(std::make_unique<CountingPending>(&waits));  // replacing a waited handle is fine
  moved.wait(ctx);
  EXPECT_EQ(waits, 2);
}

TEST(CollectiveHandle, DroppingOrOverwritingAnOperationInFlightIsFatal) {
  int waits = 0;
  EXPECT_DEATH({ CollectiveHandle handle(std::make_unique<CountingPending>(&waits)); },
               "all_reduce on group 'test' was started but never waited on");
  EXPECT_DEATH(
      {
        CollectiveHandle handle(std::make_unique<CountingPending>(&waits));
        handle = CollectiveHandle();
      },
      "all_reduce on group 'test' was overwritten before it was waited on");
}

}  // namespace
}  // namespace gpt
