// The communicator of a group of one rank: reductions are identities, gathers are copies queued on
// the context's stream. Nothing is ever in flight, so every handle is already complete.
#pragma once

#include "parallel/comm/communicator.h"

namespace gpt {

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }

  CollectiveHandle start_all_reduce(Context&, const Tensor&, ReduceOp) override { return {}; }
  CollectiveHandle start_reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input, ReduceOp) override;
  CollectiveHandle start_all_gather(Context& ctx, const Tensor& output, const Tensor& input) override;
  CollectiveHandle start_broadcast(Context&, const Tensor&, int root) override;
  CollectiveHandle start_exchange(Context&, std::span<const PeerTransfer> transfers) override;
  void barrier(Context&) override {}

 private:
  std::string name_;
};

}  // namespace gpt
