#include "parallel/comm/torchrun_runtime.h"

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <sstream>
#include <thread>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_split.h"
#include "core/logging.h"
#include "parallel/comm/gloo_grid.h"
#include "parallel/comm/store_agreement.h"
#include "parallel/comm/tcp_store.h"
#include "parallel/comm/world_agreement.h"

namespace gpt {
namespace {

using Clock = std::chrono::steady_clock;

const TorchrunEnv* running_world = nullptr;

Clock::time_point deadline_after(double seconds) {
  return Clock::now() + std::chrono::duration_cast<Clock::duration>(std::chrono::duration<double>(seconds));
}

// A fatal error ends this rank with its code; the agent ends the others (no MPI_Abort here).
void exit_rank(int exit_code) {
  std::fflush(nullptr);
  _exit(exit_code == 0 ? 1 : exit_code);
}

std::string host_name() {
  char host[256] = {};
  gethostname(host, sizeof(host) - 1);
  return host;
}

}  // namespace

TorchrunRuntime::TorchrunRuntime(double timeout_seconds) {
  if (!launched_by_torchrun()) return;
  status_ = form_world(timeout_seconds);
  if (!status_.ok()) return;
  active_ = true;
  running_world = &env_;
}

TorchrunRuntime::~TorchrunRuntime() {
  if (!active_) return;
  world::use_store(nullptr, "", 0, 1);
  running_world = nullptr;
  gloo_.reset();
  // Rank 0 may host the store, and the others may still be reading their last answer from it:
  // each says it is leaving, and rank 0 keeps the store up until all have (bounded).
  (void)store_->set(absl::StrCat(prefix_, "left/", env_.rank), "");
  if (server_ != nullptr) {
    // A rank that ended without a word (its connection closed, tcp_store.h) counts as left.
    const Clock::time_point deadline = deadline_after(std::min(60.0, world::timeout_seconds()));
    for (int r = 1; r < env_.world_size; ++r) {
      const std::vector<std::string> left = {absl::StrCat(prefix_, "left/", r)};
      const std::vector<std::string> closed = {absl::StrCat(prefix_, "closed/", r)};
      while (Clock::now() < deadline && !store_->check(left).value_or(true) && !store_->check(closed).value_or(true)) {
        std::this_thread::sleep_for(std::chrono::milliseconds(5));
      }
    }
  }
  store_.reset();
  server_.reset();
}

absl::Status TorchrunRuntime::form_world(double timeout_seconds) {
  GPT_ASSIGN_OR_RETURN(env_, read_torchrun_env());
  set_log_rank(env_.rank);
  set_fatal_handler(exit_rank);
  if (env_.rank == 0 && !env_.agent_store) {
    GPT_ASSIGN_OR_RETURN(server_, TcpStoreServer::start(env_.master_port));
  }
  GPT_ASSIGN_OR_RETURN(store_, TcpStoreClient::connect(env_.master_addr, env_.master_port, timeout_seconds));
  prefix_ = absl::StrCat("gpt/", env_.run_id, "/", env_.restart_count, "/");
  GPT_RETURN_IF_ERROR(meet(timeout_seconds));
  world::use_store(store_.get(), prefix_, env_.rank, env_.world_size);
  world::set_timeout_seconds(timeout_seconds);
  GPT_ASSIGN_OR_RETURN(gloo_, connect_gloo_world(*store_, env_));
  return absl::OkStatus();
}

// Step 3 of the header: every rank sets "arrived/<rank>" to its WORLD_SIZE and counts itself in
// "arrivals"; rank 0 waits for ranks 1..WORLD_SIZE-1 and sets "verdict" ("" or the problem).
absl::Status TorchrunRuntime::meet(double timeout_seconds) {
  TcpStoreClient& store = *store_;
  const std::string where = absl::StrCat(" at the key-value store ", store.address());
  GPT_RETURN_IF_ERROR(store.set(absl::StrCat(prefix_, "client/", env_.rank), ""));  // tcp_store.h: closed/<rank>
  GPT_RETURN_IF_ERROR(store.set(absl::StrCat(prefix_, "arrived/", env_.rank), std::to_string(env_.world_size)));
  int64_t arrivals = 0, copies = 0;
  GPT_RETURN_IF_ERROR(store.add(prefix_ + "arrivals", 1, &arrivals));
  GPT_RETURN_IF_ERROR(store.add(absl::StrCat(prefix_, "copies/", env_.rank), 1, &copies));
  if (copies > 1) {
    return absl::InvalidArgumentError(absl::StrCat("torchrun rendezvous", where, ": RANK=", env_.rank,
                                                   " arrived twice (two workers were given the same RANK)"));
  }
  if (env_.rank != 0) {
    // Rank 0's verdict, a grace period after its own deadline.
    absl::StatusOr<std::string> verdict =
        store.get(prefix_ + "verdict", deadline_after(timeout_seconds + std::max(2.0, 0.1 * timeout_seconds)));
    if (absl::IsDeadlineExceeded(verdict.status())) {
      return absl::DeadlineExceededError(absl::StrCat("torchrun rendezvous", where, ": world rank 0 did not answer within ",
                                                      timeout_seconds, " s (--distributed-timeout-minutes)"));
    }
    if (!verdict.ok()) return verdict.status();
    if (!verdict->empty()) {
      quiet_ = true;  // rank 0 reports it
      return absl::AbortedError(*verdict);
    }
    return absl::OkStatus();
  }
  std::vector<std::string> keys;
  for (int r = 1; r < env_.world_size; ++r) keys.push_back(absl::StrCat(prefix_, "arrived/", r));
  const absl::Status all_there = store.wait(keys, deadline_after(timeout_seconds));
  if (!all_there.ok() && !absl::IsDeadlineExceeded(all_there)) return all_there;
  std::ostringstream missing, disagreeing;
  for (int r = 1; r < env_.world_size; ++r) {
    GPT_ASSIGN_OR_RETURN(const bool there, store.check({keys[static_cast<size_t>(r - 1)]}));
    if (!there) {
      missing << (missing.tellp() > 0 ? "," : "") << r;
      continue;
    }
    GPT_ASSIGN_OR_RETURN(const std::string size, store.get(keys[static_cast<size_t>(r - 1)], deadline_after(1.0)));
    if (size != std::to_string(env_.world_size)) disagreeing << ", world rank " << r << " has " << size;
  }
  GPT_RETURN_IF_ERROR(store.add(prefix_ + "arrivals", 0, &arrivals));
  std::string problem;
  if (disagreeing.tellp() > 0) {
    problem = absl::StrCat("torchrun rendezvous: the ranks disagree on WORLD_SIZE: world rank 0 has ", env_.world_size,
                           disagreeing.str());
  } else if (missing.tellp() > 0) {
    problem = absl::StrCat("torchrun rendezvous", where, ": world ranks [", missing.str(), "] of WORLD_SIZE=",
                           env_.world_size, " did not arrive within ", timeout_seconds,
                           " s (--distributed-timeout-minutes)");
  } else if (arrivals > env_.world_size) {
    problem = absl::StrCat("torchrun rendezvous", where, ": ", arrivals, " ranks arrived for WORLD_SIZE=",
                           env_.world_size, " (a rank given a larger WORLD_SIZE, or a RANK twice)");
  }
  GPT_RETURN_IF_ERROR(store.set(prefix_ + "verdict", problem));
  if (problem.empty()) return absl::OkStatus();
  // Rank 0 hosts the store under the c10d rendezvous: the others read the verdict before it goes.
  std::this_thread::sleep_for(std::chrono::milliseconds(server_ != nullptr ? 1000 : 0));
  return absl::FailedPreconditionError(problem);
}

std::unique_ptr<ProcessGrid> TorchrunRuntime::build_grid(const GridShape& shape, double timeout_seconds) {
  GPT_CHECK(active_) << "build_grid without a torchrun world";
  return build_gloo_grid(*gloo_, *store_, absl::StrCat(prefix_, "grid", grids_++, "/"), shape, env_.rank,
                         timeout_seconds);
}

const TorchrunEnv* torchrun_world() { return running_world; }

int torchrun_node_ranks_with_same_key(const std::string& key) {
  // Rank 0 counts, per rank, the ranks on the same host with an equal key, and sends the counts.
  const std::vector<std::string> all = world::gather_to_rank0(host_name() + "\n" + key, "ranks per GPU");
  std::string counts;
  if (world::rank() == 0) {
    std::map<std::string, int> same;
    for (const std::string& entry : all) ++same[entry];
    for (const std::string& entry : all) absl::StrAppend(&counts, counts.empty() ? "" : ",", same[entry]);
  }
  world::broadcast_from_rank0(counts, "ranks per GPU");
  const std::vector<std::string> by_rank = absl::StrSplit(counts, ',');
  int mine = 1;
  GPT_CHECK(absl::SimpleAtoi(by_rank.at(static_cast<size_t>(world::rank())), &mine)) << counts;
  return mine;
}

}  // namespace gpt
