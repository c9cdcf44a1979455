// Collectives over a Gloo context (TCP transport) on host buffers, for jobs started by torchrun on
// the CPU backend (Megatron's --distributed-backend gloo). Device buffers are staged through host
// memory; BF16 and FP16 reductions are done in FP32, as on the MPI communicator.
//
// Sums are formed in OpenMPI's order (a binomial tree to rank 0), so a job started by torchrun
// computes the same bits as the same job under mpirun.
//
// Gloo's collectives block, so each communicator runs them on a worker thread of its own, in the
// order they were started (every rank of a group starts that group's collectives in the same
// order, so the orders agree): start_x queues the operation and returns, wait() waits for it.
// Sends and receives (start_exchange) are Gloo's unbound-buffer operations, posted at once from the
// caller's thread on a slot of their own, so a batch in flight never waits behind a collective.
// Every wait is bounded by the group's timeout (--distributed-timeout-minutes), and a timeout or a
// peer that ended names the operation, the group, its world ranks and the waiting rank.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

#include "parallel/comm/communicator.h"

namespace gloo {
class Context;
}

namespace gpt {

class GlooCommunicator final : public Communicator {
 public:
  // `context`: the group's connected Gloo context (rank and size are its own); `world_ranks`: the
  // members' world ranks, by group rank, for messages.
  GlooCommunicator(std::shared_ptr<gloo::Context> context, std::string name, double timeout_seconds,
                   std::vector<int> world_ranks);
  ~GlooCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  CollectiveHandle start_all_reduce(Context& ctx, const Tensor& data, ReduceOp op) override;
  CollectiveHandle start_reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input, ReduceOp op) override;
  CollectiveHandle start_all_gather(Context& ctx, const Tensor& output, const Tensor& input) override;
  CollectiveHandle start_broadcast(Context& ctx, const Tensor& data, int root) override;
  CollectiveHandle start_exchange(Context& ctx, std::span<const PeerTransfer> transfers) override;
  void barrier(Context& ctx) override;

  // The fatal message for `operation` failing (`why`: Gloo's words, or the timeout) on this rank.
  [[noreturn]] void fail(const std::string& operation, const std::string& why) const;

  class Job;  // one collective for the worker (gloo_communicator.cc)
  using ReduceFunction = void (*)(void*, const void*, const void*, size_t);  // c = a (+ or max) b, n elements

 private:
  class Pending;
  class ExchangePending;

  // Queues `run` (a Gloo collective on `tag`) for the worker; the job's state is shared with the
  // returned handle's Pending.
  std::shared_ptr<Job> enqueue(std::function<void(uint32_t tag)> run);
  // On the worker: `data` (bytes / element elements) summed over the group into rank 0's copy, in
  // OpenMPI's order; the bytes at `data` on `root` to every rank.
  void reduce_to_root(void* data, size_t bytes, size_t element, ReduceFunction reduce, uint32_t tag);
  void broadcast_bytes(void* data, size_t bytes, int root, uint32_t tag);
  void work();

  std::shared_ptr<gloo::Context> context_;
  std::string name_;
  double timeout_seconds_;
  int rank_, size_;
  std::vector<int> world_ranks_;

  std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::shared_ptr<Job>> queue_;
  bool stopping_ = false;
  uint32_t next_tag_ = 0;  // the worker's: collectives on one context need distinct slots
  std::thread worker_;
};

}  // namespace gpt
