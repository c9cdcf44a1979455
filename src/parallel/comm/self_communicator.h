// The communicator of a group of one rank: reductions are identities, gathers are copies.
#pragma once

#include "parallel/comm/communicator.h"

namespace gpt {

class SelfCommunicator final : public Communicator {
 public:
  explicit SelfCommunicator(std::string name) : name_(std::move(name)) {}

  int rank() const override { return 0; }
  int size() const override { return 1; }
  const std::string& name() const override { return name_; }

  void all_reduce(Context&, const Tensor&, ReduceOp) override {}
  void reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input, ReduceOp) override;
  void all_gather(Context& ctx, const Tensor& output, const Tensor& input) override;
  void broadcast(Context&, const Tensor&, int root) override;
  void exchange(Context&, std::span<const PeerTransfer> transfers) override;
  void barrier(Context&) override {}

 private:
  std::string name_;
};

}  // namespace gpt
