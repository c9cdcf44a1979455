// Start-up of a job launched by torchrun (python3 -m torch.distributed.run; env:// rendezvous), the
// counterpart of MpiRuntime for mpirun and srun:
//   1. torchrun's variables are read and checked (torchrun_env.h);
//   2. the key-value store at MASTER_ADDR:MASTER_PORT is reached: the one torchrun's agent hosts
//      under the static rendezvous (TORCHELASTIC_USE_AGENT_STORE=True), else one rank 0 hosts
//      (tcp_store.h); keys are under "gpt/<run id>/<restart count>/", so a restarted job never
//      reads the keys of the attempt before;
//   3. the ranks meet: rank 0 waits for every rank of WORLD_SIZE, checks that they agree on
//      WORLD_SIZE and that no more arrived, and answers; every wait is bounded (the
//      --distributed-timeout-minutes given on the command line, else 10 minutes: the launcher reads
//      it before start-up), and a failure is
//      one line from one rank (rank 0, or the rank that could not reach it), the others exiting 1
//      without a word;
//   4. the world agreements go over the store from then on (store_agreement.h) and the Gloo world
//      is connected over TCP (gloo_grid.h), from which the grid's groups are formed.
// A fatal error on one rank ends that rank with its exit code (not an abort): torchrun's agent
// then stops the other workers, and restarts them all if --max-restarts allows.
#pragma once

#include <memory>
#include <string>

#include "core/status.h"
#include "parallel/comm/torchrun_env.h"
#include "parallel/process_grid.h"

namespace gpt {

class TcpStoreClient;
class TcpStoreServer;
struct GlooWorld;
struct GlooWorldDeleter {
  void operator()(GlooWorld* world) const;
};

class TorchrunRuntime {
 public:
  // Forms the world (steps 1-4) when launched_by_torchrun(); otherwise does nothing (inactive).
  explicit TorchrunRuntime(double timeout_seconds);
  ~TorchrunRuntime();
  TorchrunRuntime(const TorchrunRuntime&) = delete;
  TorchrunRuntime& operator=(const TorchrunRuntime&) = delete;

  // Why the world could not be formed (OK when it was, or when torchrun did not start this process).
  const absl::Status& status() const { return status_; }
  // This rank failed because another reports the failure: exit 1 without a line.
  bool failed_quietly() const { return quiet_; }
  bool active() const { return active_; }
  int world_rank() const { return env_.rank; }
  int world_size() const { return env_.world_size; }
  const TorchrunEnv& env() const { return env_; }

  // The process grid on Gloo communicators (self for groups of one). Collective over the world.
  std::unique_ptr<ProcessGrid> build_grid(const GridShape& shape, double timeout_seconds);

 private:
  absl::Status form_world(double timeout_seconds);
  absl::Status meet(double timeout_seconds);

  TorchrunEnv env_;
  absl::Status status_;
  bool active_ = false;
  bool quiet_ = false;
  std::string prefix_;
  int grids_ = 0;
  std::unique_ptr<TcpStoreServer> server_;
  std::unique_ptr<TcpStoreClient> store_;
  std::unique_ptr<GlooWorld, GlooWorldDeleter> gloo_;
};

// The running torchrun world's variables, or nullptr (no torchrun world in this process).
const TorchrunEnv* torchrun_world();
// node_ranks_with_same_key (mpi_runtime.h) for a torchrun world: the ranks on this host passing an
// equal key. Collective over the world.
int torchrun_node_ranks_with_same_key(const std::string& key);

}  // namespace gpt
