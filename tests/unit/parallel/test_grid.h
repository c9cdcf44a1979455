// The grid a multi-rank unit test runs its collectives on, from the launcher that started it:
// MPI communicators under mpirun (mpi_test_main.cc), Gloo ones under torchrun
// (torchrun_test_main.cc), so one test file checks both kinds with the same assertions.
#pragma once

#include <memory>

#include "parallel/process_grid.h"

namespace gpt {

std::unique_ptr<ProcessGrid> build_test_grid(const GridShape& shape, double timeout_seconds);

}  // namespace gpt
