#include "parallel/comm/mpi_runtime.h"

#include <mpi.h>

#include <cstdlib>

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
