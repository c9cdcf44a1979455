#include "parallel/comm/mpi_runtime.h"

#include <mpi.h>

#include <algorithm>
#include <cstdlib>
#include <initializer_list>

#include "core/check.h"
#include "core/logging.h"

namespace gpt {
namespace {
void abort_world(int exit_code) { MPI_Abort(MPI_COMM_WORLD, exit_code == 0 ? 1 : exit_code); }
}  // namespace

bool launched_by_mpi() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_NTASKS"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

namespace {
int first_environment_int(std::initializer_list<const char*> names, int fallback) {
  for (const char* name : names) {
    if (const char* value = std::getenv(name)) return std::atoi(value);
  }
  return fallback;
}
}  // namespace

int local_rank() { return first_environment_int({"OMPI_COMM_WORLD_LOCAL_RANK", "SLURM_LOCALID", "MPI_LOCALRANKID"}, 0); }

int local_world_size() {
  return std::max(1, first_environment_int({"OMPI_COMM_WORLD_LOCAL_SIZE", "SLURM_NTASKS_PER_NODE", "MPI_LOCALNRANKS"}, 1));
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  if (!launched_by_mpi()) return;
  int provided = 0;
  GPT_CHECK_EQ(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), MPI_SUCCESS) << "MPI_Init_thread";
  active_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  // Errors in MPI calls are reported by return code and turned into fatal checks with the call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  set_log_rank(world_rank_);
  set_fatal_handler(abort_world);
}

MpiRuntime::~MpiRuntime() {
  if (active_) MPI_Finalize();
}

}  // namespace gpt
