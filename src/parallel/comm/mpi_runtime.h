// MPI start-up and shut-down. Under a launcher (mpirun, srun) MPI is initialized; started without
// one, the process is a world of one and MPI is never touched, so no launcher is needed.
#pragma once

#include <string>

namespace gpt {

class MpiRuntime {
 public:
  // Initializes MPI when the environment shows a launcher; installs MPI_Abort as the fatal handler
  // so that a failing check on one rank ends the whole job. Also forms the node-local group
  // (local_rank(), local_world_size()), collectively over the world.
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

// True when an MPI launcher started this process (OpenMPI, PMI/PMIx, Slurm variables) and torchrun
// did not.
bool launched_by_mpi();

// This process's index among the ranks on its node, and their number. Under torchrun they are its
// LOCAL_RANK and LOCAL_WORLD_SIZE (the agent starts the node's workers itself). Under MPI they come from MPI itself
// (MPI_Comm_split_type with MPI_COMM_TYPE_SHARED, formed by MpiRuntime), never from a launcher's
// environment variables, so mpirun, srun, hydra and a hand-made hostfile agree; 0 and 1 without
// MPI. Used to pick a GPU and to share the node's cores.
int local_rank();
int local_world_size();

// How many ranks on this node, this one included, pass an equal `key`. Collective over the node's
// ranks (every rank of the world must call it); 1 without MPI. Finds ranks that would share a GPU.
int node_ranks_with_same_key(const std::string& key);

// The GPU a node-local rank uses among the `visible_gpus` the CUDA runtime shows it. The runtime
// numbers only the devices in CUDA_VISIBLE_DEVICES, from 0, so this is right both when every rank
// sees all of the node's GPUs (rank r takes GPU r) and when the launcher shows each rank only its
// own (every rank takes its device 0). More ranks than GPUs wrap around: see the launcher for
// when that sharing is allowed.
int gpu_for_local_rank(int local_rank, int visible_gpus);

}  // namespace gpt
