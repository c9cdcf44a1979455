// What torchrun (python3 -m torch.distributed.run) tells each worker it starts, read once from the
// environment: RANK, WORLD_SIZE, LOCAL_RANK, LOCAL_WORLD_SIZE, GROUP_RANK (the agent's node),
// MASTER_ADDR, MASTER_PORT, TORCHELASTIC_RESTART_COUNT, TORCHELASTIC_RUN_ID, and whether the agent
// hosts the key-value store at MASTER_PORT (TORCHELASTIC_USE_AGENT_STORE, the static rendezvous).
#pragma once

#include <optional>
#include <string>

#include "core/status.h"

namespace gpt {

struct TorchrunEnv {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int group_rank = 0;
  std::string master_addr;
  int master_port = 0;
  int restart_count = 0;
  std::string run_id;
  bool agent_store = false;  // the agent serves MASTER_PORT; rank 0 must not host its own
};

// True when torchrun's variables are present (RANK and WORLD_SIZE with MASTER_ADDR, or
// TORCHELASTIC_RUN_ID).
bool launched_by_torchrun();
// True when an MPI launcher's world variables are present (OpenMPI, PMI, PMIx; SLURM_NTASKS alone
// is not one: torchrun is commonly started by srun, one agent per node).
bool mpi_world_variables_present();

// The variables, checked: every one present and a number where it should be, 0 <= RANK <
// WORLD_SIZE, 0 <= LOCAL_RANK < LOCAL_WORLD_SIZE <= WORLD_SIZE, a port in 1..65535. The message
// names the variable.
absl::StatusOr<TorchrunEnv> read_torchrun_env();

// The launch environments that disagree, or nullopt: torchrun's variables beside an MPI launcher's
// (mpirun or srun --mpi=pmix starting torchrun's workers, or torchrun starting mpirun's), which would
// form two different worlds.
std::optional<std::string> mixed_launch_environment();

}  // namespace gpt
