// The node-local rank and size come from MPI (a shared-memory split of the world), not from a
// launcher's environment. CMakeLists.txt runs this under mpirun -np 3 on one node three times:
// plain, with OpenMPI's local-rank variables removed, and with OpenMPI's, Slurm's and MPICH's
// local-rank variables garbled. Every run must see the same answers.
#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "parallel/comm/mpi_runtime.h"

namespace gpt {
namespace {

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

// The environment this run was given, checked so that a launcher change that dropped the
// variables' edits could not make the test pass vacuously.
TEST(NodeLocal, RunsInTheEnvironmentItWasGiven) {
  const char* mode = std::getenv("GPT_NODE_LOCAL_ENV");
  const char* ompi_local_rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  if (mode == nullptr) GTEST_SKIP() << "launcher environment as mpirun set it";
  if (std::string(mode) == "unset") {
    EXPECT_EQ(ompi_local_rank, nullptr);
    EXPECT_EQ(std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE"), nullptr);
  } else {
    ASSERT_EQ(std::string(mode), "garbled");
    ASSERT_NE(ompi_local_rank, nullptr);
    EXPECT_EQ(std::string(ompi_local_rank), "7");
    EXPECT_EQ(std::string(std::getenv("SLURM_LOCALID")), "5");
  }
}

TEST(NodeLocal, RankAndSizeOnOneNode) {
  ASSERT_EQ(world_size(), 3) << "run with mpirun -np 3 on one node";
  EXPECT_EQ(local_world_size(), 3);
  EXPECT_EQ(local_rank(), world_rank());  // node-local ranks keep the world order
}

TEST(NodeLocal, AgreesWithProcessorNames) {
  // An independent reference: the ranks reporting this rank's processor name.
  char name[MPI_MAX_PROCESSOR_NAME] = {};
  int length = 0;
  MPI_Get_processor_name(name, &length);
  std::vector<char> names(static_cast<size_t>(world_size()) * MPI_MAX_PROCESSOR_NAME);
  MPI_Allgather(name, MPI_MAX_PROCESSOR_NAME, MPI_CHAR, names.data(), MPI_MAX_PROCESSOR_NAME, MPI_CHAR, MPI_COMM_WORLD);
  int same = 0, lower = 0;
  for (int r = 0; r < world_size(); ++r) {
    if (std::string(&names[static_cast<size_t>(r) * MPI_MAX_PROCESSOR_NAME]) != name) continue;
    ++same;
    if (r < world_rank()) ++lower;
  }
  EXPECT_EQ(local_world_size(), same);
  EXPECT_EQ(local_rank(), lower);
}

TEST(NodeLocal, CountsRanksWithTheSameKey) {
  const int rank = world_rank();
  // Ranks 0 and 2 name one GPU, rank 1 another.
  EXPECT_EQ(node_ranks_with_same_key(rank % 2 == 0 ? "GPU-aaaa" : "GPU-bbbb"), rank % 2 == 0 ? 2 : 1);
  EXPECT_EQ(node_ranks_with_same_key("one GPU for all"), 3);
  // Keys of different lengths, one a prefix of another, and the empty key are all distinct.
  EXPECT_EQ(node_ranks_with_same_key(std::string(static_cast<size_t>(rank), 'x')), 1);
}

TEST(NodeLocal, GpuIsTheLocalRankAmongTheVisibleOnes) {
  EXPECT_EQ(gpu_for_local_rank(0, 4), 0);
  EXPECT_EQ(gpu_for_local_rank(3, 4), 3);
  EXPECT_EQ(gpu_for_local_rank(5, 4), 1);  // more ranks than GPUs wrap (MPI backend only)
  EXPECT_EQ(gpu_for_local_rank(2, 1), 0);  // each rank shown only its own GPU
}

}  // namespace
}  // namespace gpt
