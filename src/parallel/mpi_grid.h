// Builds the process grid from MPI_COMM_WORLD with MPI_Comm_split, one MPI communicator per group.
#pragma once

#include <memory>

#include "parallel/process_grid.h"

namespace gpt {

// MPI must be initialized and the world size must equal shape.world().
std::unique_ptr<ProcessGrid> build_mpi_grid(const GridShape& shape, double timeout_seconds);

}  // namespace gpt
