// GoogleTest main for tests that run under mpirun: every rank runs every test, and the job fails
// on every rank if any rank saw a failure (so mpirun's exit status tells the truth).
#include <mpi.h>

#include "gtest/gtest.h"
#include "parallel/comm/mpi_runtime.h"
#include "parallel/mpi_grid.h"
#include "test_grid.h"

namespace gpt {

std::unique_ptr<ProcessGrid> build_test_grid(const GridShape& shape, double timeout_seconds) {
  return build_mpi_grid(shape, timeout_seconds);
}

}  // namespace gpt

int main(int argc, char** argv) {
  gpt::MpiRuntime mpi(&argc, &argv);
  ::testing::InitGoogleTest(&argc, argv);
  if (mpi.world_rank() != 0) {
    // Only rank 0 prints progress; failures on any rank are still printed by that rank.
    ::testing::TestEventListeners& listeners = ::testing::UnitTest::GetInstance()->listeners();
    delete listeners.Release(listeners.default_result_printer());
  }
  int failed = RUN_ALL_TESTS() != 0 ? 1 : 0;
  if (mpi.active()) MPI_Allreduce(MPI_IN_PLACE, &failed, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
  return failed;
}
