// Collectives on GPU buffers through NCCL, one rank per GPU. Work is enqueued on the
// communicator's own stream after the context's earlier work; waiting on the handle makes the
// context's stream wait for it by an event, so the host never waits and the compute stream runs
// on until the caller needs the result. A watchdog thread bounds every operation by the timeout,
// waited on or not: an operation still unfinished at its deadline, or an asynchronous NCCL error,
// aborts the communicator and ends the job with the collective, the group and the waiting rank.
#pragma once

#include <memory>
#include <string>

#include "parallel/comm/communicator.h"

namespace gpt {

class NcclCommunicator final : public Communicator {
 public:
  // Collective over `bootstrap`'s group (rank 0 creates the NCCL id and broadcasts it over
  // `bootstrap`, an MPI or self communicator). `ctx` must be a GPU context.
  NcclCommunicator(Context& ctx, Communicator& bootstrap, std::string name, double timeout_seconds);
  ~NcclCommunicator() override;

  int rank() const override;
  int size() const override;
  const std::string& name() const override;

  CollectiveHandle start_all_reduce(Context& ctx, const Tensor& data, ReduceOp op) override;
  CollectiveHandle start_reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input, ReduceOp op) override;
  CollectiveHandle start_all_gather(Context& ctx, const Tensor& output, const Tensor& input) override;
  CollectiveHandle start_broadcast(Context& ctx, const Tensor& data, int root) override;
  CollectiveHandle start_exchange(Context& ctx, std::span<const PeerTransfer> transfers) override;
  void barrier(Context& ctx) override;

 private:
  class State;
  std::unique_ptr<State> state_;
};

}  // namespace gpt
