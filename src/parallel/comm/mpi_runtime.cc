#include "parallel/comm/mpi_runtime.h"

#include <mpi.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <condition_variable>
#include <cstdio>
#include <cstdlib>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "core/check.h"
#include "core/logging.h"
#include "parallel/comm/world_agreement.h"

namespace gpt {
namespace {

void abort_world(int exit_code) { MPI_Abort(MPI_COMM_WORLD, exit_code == 0 ? 1 : exit_code); }

// The ranks that share this node's memory, formed once at start-up: a collective split cannot be
// done lazily, since only some ranks might ask. MPI_COMM_NULL without MPI.
struct NodeGroup {
  MPI_Comm comm = MPI_COMM_NULL;
  int rank = 0;
  int size = 1;
};
NodeGroup node_group;

// Waits for a non-blocking collective on the node's ranks, bounded like every agreement
// (--distributed-timeout-minutes): a node-local rank that never arrives ends the job naming it.
// The node's ranks give up a second apart, in node order, so that the first report ends the job
// and is the only line.
void wait_on_node(MPI_Request& request, const char* what) {
  const double patience = world::timeout_seconds() + std::min(node_group.rank, 8);
  const auto deadline = std::chrono::steady_clock::now() +
                        std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                            std::chrono::duration<double>(patience));
  auto pause = std::chrono::microseconds(0);
  while (true) {
    int done = 0;
    GPT_CHECK_EQ(MPI_Test(&request, &done, MPI_STATUS_IGNORE), MPI_SUCCESS) << what;
    if (done) return;
    if (std::chrono::steady_clock::now() > deadline) {
      GPT_FATAL() << what << " on the node's " << node_group.size << " ranks timed out after " << patience
                  << " s (--distributed-timeout-minutes): a rank of this node did not "
                  << "arrive";
    }
    if (pause.count() > 0) std::this_thread::sleep_for(pause);
    pause = std::min(std::chrono::microseconds(1000), pause + std::chrono::microseconds(20));
  }
}

// This process's world rank as the launcher tells it before MPI_Init (Open MPI, PMIx, Hydra, Slurm);
// -1 when none says.
int launcher_rank() {
  for (const char* variable : {"OMPI_COMM_WORLD_RANK", "PMIX_RANK", "PMI_RANK", "SLURM_PROCID"}) {
    if (const char* value = std::getenv(variable); value != nullptr) return std::atoi(value);
  }
  return -1;
}

// Start-up bounded like every agreement (--distributed-timeout-minutes, world::timeout_seconds()):
// MPI_Init waits in the launcher's fence for every rank, and the node split that follows is a
// collective, so a rank that stops or dies before it arrives would leave the others there forever,
// silent. A thread watches the phases; past the deadline it prints one line naming the phase and
// ends the process with exit status 1 (the launcher then ends the job). Ranks give up a few seconds
// apart in rank order, so that the first report is the only line.
class StartupWatchdog {
 public:
  StartupWatchdog() : rank_(launcher_rank()) {
    // Apart by what the launcher needs to end the others once one exits (2 s, or a tenth of the
    // timeout, as world_agreement's grace), so that the first report is the only line.
    const double apart = std::max(2.0, 0.1 * world::timeout_seconds());
    const double patience = world::timeout_seconds() + apart * std::min(std::max(rank_, 0), 8);
    thread_ = std::thread([this, patience] { watch(patience); });
  }
  ~StartupWatchdog() {
    {
      std::lock_guard<std::mutex> lock(mutex_);
      done_ = true;
    }
    wake_.notify_all();
    thread_.join();
  }
  void phase(const char* name) {
    std::lock_guard<std::mutex> lock(mutex_);
    phase_ = name;
  }

 private:
  void watch(double patience) {
    std::unique_lock<std::mutex> lock(mutex_);
    if (wake_.wait_for(lock, std::chrono::duration<double>(patience), [this] { return done_; })) return;
    const std::string rank = rank_ >= 0 ? std::to_string(rank_) : std::string("?");
    std::fprintf(stderr,
                 "error: start-up timed out on rank %s after %g s (--distributed-timeout-minutes): %s did not "
                 "complete; a rank of the job stopped, died or never started\n",
                 rank.c_str(), patience, phase_);
    std::fflush(stderr);
    _exit(1);  // MPI cannot be asked to abort before it is initialized
  }

  const int rank_;
  std::mutex mutex_;
  std::condition_variable wake_;
  bool done_ = false;
  const char* phase_ = "MPI_Init (the launcher's wait for every rank to start)";
  std::thread thread_;
};

}  // namespace

bool launched_by_mpi() {
  for (const char* variable : {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_RANK", "SLURM_NTASKS"}) {
    if (std::getenv(variable) != nullptr) return true;
  }
  return false;
}

int local_rank() { return node_group.rank; }
int local_world_size() { return node_group.size; }

int node_ranks_with_same_key(const std::string& key) {
  if (node_group.comm == MPI_COMM_NULL) return 1;
  // Keys of any length: gather the lengths, then the bytes.
  const int length = static_cast<int>(key.size());
  std::vector<int> lengths(static_cast<size_t>(node_group.size)), offsets(lengths.size());
  MPI_Request request = MPI_REQUEST_NULL;
  GPT_CHECK_EQ(MPI_Iallgather(&length, 1, MPI_INT, lengths.data(), 1, MPI_INT, node_group.comm, &request), MPI_SUCCESS)
      << "MPI_Iallgather of key lengths on the node";
  wait_on_node(request, "MPI_Iallgather of the GPU keys' lengths");
  int total = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    offsets[r] = total;
    total += lengths[r];
  }
  std::string keys(static_cast<size_t>(total), '\0');
  GPT_CHECK_EQ(MPI_Iallgatherv(key.data(), length, MPI_CHAR, keys.data(), lengths.data(), offsets.data(), MPI_CHAR,
                               node_group.comm, &request),
               MPI_SUCCESS)
      << "MPI_Iallgatherv of keys on the node";
  wait_on_node(request, "MPI_Iallgatherv of the GPU keys");
  int same = 0;
  for (size_t r = 0; r < lengths.size(); ++r) {
    if (keys.compare(static_cast<size_t>(offsets[r]), static_cast<size_t>(lengths[r]), key) == 0) ++same;
  }
  return same;
}

int gpu_for_local_rank(int local_rank, int visible_gpus) {
  GPT_CHECK_GT(visible_gpus, 0) << "no visible GPU to choose from";
  GPT_CHECK_GE(local_rank, 0);
  return local_rank % visible_gpus;
}

MpiRuntime::MpiRuntime(int* argc, char*** argv) {
  if (!launched_by_mpi()) return;
  StartupWatchdog watchdog;
  int provided = 0;
  GPT_CHECK_EQ(MPI_Init_thread(argc, argv, MPI_THREAD_FUNNELED, &provided), MPI_SUCCESS) << "MPI_Init_thread";
  watchdog.phase("forming the node's group of ranks (MPI_Comm_split_type, every rank of the job)");
  active_ = true;
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &world_size_);
  // Errors in MPI calls are reported by return code and turned into fatal checks with the call.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  set_log_rank(world_rank_);
  set_fatal_handler(abort_world);
  // Keyed by world rank, so node-local ranks keep the world order.
  GPT_CHECK_EQ(MPI_Comm_split_type(MPI_COMM_WORLD, MPI_COMM_TYPE_SHARED, world_rank_, MPI_INFO_NULL, &node_group.comm),
               MPI_SUCCESS)
      << "MPI_Comm_split_type(MPI_COMM_TYPE_SHARED)";
  MPI_Comm_set_errhandler(node_group.comm, MPI_ERRORS_RETURN);
  MPI_Comm_rank(node_group.comm, &node_group.rank);
  MPI_Comm_size(node_group.comm, &node_group.size);
}

MpiRuntime::~MpiRuntime() {
  if (!active_) return;
  MPI_Comm_free(&node_group.comm);
  node_group = NodeGroup{};
  MPI_Finalize();
}

}  // namespace gpt
