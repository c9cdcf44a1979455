// MPI start-up and shut-down. Under a launcher (mpirun, srun) MPI is initialized; started without
// one, the process is a world of one and MPI is never touched, so no launcher is needed.
#pragma once

namespace gpt {

class MpiRuntime {
 public:
  // Initializes MPI when the environment shows a launcher; installs MPI_Abort as the fatal handler
  // so that a failing check on one rank ends the whole job.
  MpiRuntime(int* argc, char*** argv);
  ~MpiRuntime();
  MpiRuntime(const MpiRuntime&) = delete;
  MpiRuntime& operator=(const MpiRuntime&) = delete;

  bool active() const { return active_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return world_size_; }

 private:
  bool active_ = false;
  int world_rank_ = 0;
  int world_size_ = 1;
};

// True when an MPI launcher started this process (OpenMPI, PMI/PMIx, Slurm variables).
bool launched_by_mpi();

// This process's index among the ranks on its node, and their number, from the launcher's
// environment (OpenMPI, then Slurm); 0 and 1 without a launcher. Used to pick a GPU and to share
// the node's cores.
int local_rank();
int local_world_size();

}  // namespace gpt
