// GoogleTest main for tests that run under torchrun (python3 -m torch.distributed.run --no-python):
// the world is formed from torchrun's environment (store, Gloo), every rank runs every test, and
// the job fails on every rank if any rank saw a failure.
#include <cstdio>

#include "gtest/gtest.h"
#include "parallel/comm/torchrun_runtime.h"
#include "parallel/comm/world_agreement.h"
#include "test_grid.h"

namespace gpt {
namespace {
TorchrunRuntime* runtime = nullptr;
}  // namespace

std::unique_ptr<ProcessGrid> build_test_grid(const GridShape& shape, double timeout_seconds) {
  return runtime->build_grid(shape, timeout_seconds);
}

}  // namespace gpt

int main(int argc, char** argv) {
  gpt::TorchrunRuntime torchrun(/*timeout_seconds=*/120.0);
  if (!torchrun.active()) {
    std::fprintf(stderr, "error: %s\n",
                 torchrun.status().ok() ? "not started by torchrun" : std::string(torchrun.status().message()).c_str());
    return 1;
  }
  gpt::runtime = &torchrun;
  ::testing::InitGoogleTest(&argc, argv);
  if (torchrun.world_rank() != 0) {
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  const int64_t failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  return static_cast<int>(gpt::world::all_reduce(failed, gpt::world::Combine::kMax, "the tests' outcome"));
}
