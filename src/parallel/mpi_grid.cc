#include "parallel/mpi_grid.h"

#include <mpi.h>

#include "core/check.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/grid_split.h"

namespace gpt {

std::unique_ptr<ProcessGrid> build_mpi_grid(const GridShape& shape, double timeout_seconds) {
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  GPT_CHECK_EQ(world_size, shape.world()) << "grid shape does not cover the world";
  MPI_Comm world_copy = MPI_COMM_NULL;
  GPT_CHECK_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &world_copy), MPI_SUCCESS) << "MPI_Comm_dup";
  auto world = std::make_unique<MpiCommunicator>(world_copy, "world", timeout_seconds);
  // MPI_Comm_split is collective over the world: every rank calls it for every group, members
  // passing their group's color, others MPI_UNDEFINED.
  const GroupSplit split = [timeout_seconds](int color, int key, const char* name) -> std::unique_ptr<Communicator> {
    MPI_Comm comm = MPI_COMM_NULL;
    GPT_CHECK_EQ(MPI_Comm_split(MPI_COMM_WORLD, color == kNotMember ? MPI_UNDEFINED : color, key, &comm), MPI_SUCCESS)
        << "MPI_Comm_split for " << name;
    if (comm == MPI_COMM_NULL) return std::make_unique<SelfCommunicator>(name);
    return std::make_unique<MpiCommunicator>(comm, name, timeout_seconds);
  };
  return build_split_grid(shape, world_rank, std::move(world), split);
}

}  // namespace gpt
