#include "parallel/mpi_grid.h"

#include <mpi.h>

#include "core/check.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/comm/self_communicator.h"

namespace gpt {
namespace {

// MPI_Comm_split is collective over the world: every rank calls it for every group, members
// passing their group's color, others MPI_UNDEFINED.
std::unique_ptr<Communicator> split(int color, int key, const char* name, double timeout_seconds) {
  MPI_Comm comm = MPI_COMM_NULL;
  GPT_CHECK_EQ(MPI_Comm_split(MPI_COMM_WORLD, color, key, &comm), MPI_SUCCESS) << "MPI_Comm_split for " << name;
  if (comm == MPI_COMM_NULL) return std::make_unique<SelfCommunicator>(name);
  return std::make_unique<MpiCommunicator>(comm, name, timeout_seconds);
}

}  // namespace

std::unique_ptr<ProcessGrid> build_mpi_grid(const GridShape& shape, double timeout_seconds) {
  int world_rank = 0, world_size = 1;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  GPT_CHECK_EQ(world_size, shape.world()) << "grid shape does not cover the world";
  const GridCoordinates c = grid_coordinates(shape, world_rank);
  const bool embedding_member = c.pipeline == 0 || c.pipeline == shape.pipeline - 1;
  MPI_Comm world_copy = MPI_COMM_NULL;
  GPT_CHECK_EQ(MPI_Comm_dup(MPI_COMM_WORLD, &world_copy), MPI_SUCCESS) << "MPI_Comm_dup";
  auto world = std::make_unique<MpiCommunicator>(world_copy, "world", timeout_seconds);
  // Colors enumerate the coordinates outside the group; keys order the members by the group's own.
  const int tc = c.tensor + shape.tensor * c.context;  // (tp, cp): a pipeline or embedding column with dp
  auto tensor = split(c.context + shape.context * (c.data + shape.data * c.pipeline), c.tensor, "tensor-parallel",
                      timeout_seconds);
  auto data = split(tc + shape.tensor * shape.context * c.pipeline, c.data, "data-parallel", timeout_seconds);
  auto pipeline = split(tc + shape.tensor * shape.context * c.data, c.pipeline, "pipeline-parallel", timeout_seconds);
  auto embedding = split(embedding_member ? tc + shape.tensor * shape.context * c.data : MPI_UNDEFINED, c.pipeline,
                         "embedding", timeout_seconds);
  auto model_parallel = split(c.data + shape.data * c.context, c.tensor + shape.tensor * c.pipeline, "model-parallel",
                              timeout_seconds);
  std::unique_ptr<Communicator> context, data_context;
  if (shape.context > 1) {
    context = split(c.tensor + shape.tensor * (c.data + shape.data * c.pipeline), c.context, "context-parallel",
                    timeout_seconds);
    data_context = split(c.tensor + shape.tensor * c.pipeline, c.context + shape.context * c.data,
                         "data-context-parallel", timeout_seconds);
  }
  std::unique_ptr<Communicator> optimizer_instance, across_optimizer_instances;
  if (shape.optimizer_instances > 1) {
    // Within a (tp, pp) position, members of the data x context group by place cp + CP * dp: the
    // instance is place / size, the place within it place % size.
    const int size = optimizer_instance_size(shape), place = c.context + shape.context * c.data;
    const int position = c.tensor + shape.tensor * c.pipeline;
    optimizer_instance = split(place / size + shape.optimizer_instances * position, place % size,
                               "distributed-optimizer-instance", timeout_seconds);
    across_optimizer_instances = split(place % size + size * position, place / size, "across-optimizer-instances",
                                       timeout_seconds);
  }
  std::unique_ptr<Communicator> context_inner, context_outer;
  if (shape.context_inner > 0) {
    // a2a+p2p's levels of the context group (same tp, dp, pp): level 0 holds the context ranks of
    // one cp / A, ordered by cp % A; level 1 those of one cp % A, ordered by cp / A.
    const int inner = shape.context_inner, outer = shape.context / inner;
    const int position = c.tensor + shape.tensor * (c.data + shape.data * c.pipeline);
    context_inner = split(c.context / inner + outer * position, c.context % inner, "context-parallel-a2a",
                          timeout_seconds);
    context_outer = split(c.context % inner + inner * position, c.context / inner, "context-parallel-p2p",
                          timeout_seconds);
  }
  return std::make_unique<ProcessGrid>(shape, world_rank, std::move(world), std::move(tensor), std::move(data),
                                       std::move(pipeline), std::move(embedding), std::move(model_parallel),
                                       std::move(context), std::move(data_context), std::move(optimizer_instance),
                                       std::move(across_optimizer_instances), std::move(context_inner),
                                       std::move(context_outer));
}

}  // namespace gpt
