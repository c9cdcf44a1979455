// A communicator that knows its size and this rank's place in it but never communicates: for
// tests of what is built from a group's shape (shard plans, buffers) without MPI. Any collective
// fails the test.
#pragma once

#include <string>

#include "gtest/gtest.h"
#include "parallel/comm/communicator.h"

namespace gpt {

class PlaceOnlyGroup final : public Communicator {
 public:
  PlaceOnlyGroup(int rank, int size, std::string name = "data-parallel")
      : rank_(rank), size_(size), name_(std::move(name)) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  CollectiveHandle start_all_reduce(Context&, const Tensor&, ReduceOp) override { return refuse(); }
  CollectiveHandle start_reduce_scatter(Context&, const Tensor&, const Tensor&, ReduceOp) override { return refuse(); }
  CollectiveHandle start_all_gather(Context&, const Tensor&, const Tensor&) override { return refuse(); }
  CollectiveHandle start_broadcast(Context&, const Tensor&, int) override { return refuse(); }
  CollectiveHandle start_exchange(Context&, std::span<const PeerTransfer>) override { return refuse(); }
  void barrier(Context&) override { static_cast<void>(refuse()); }

 private:
  static CollectiveHandle refuse() {
    ADD_FAILURE() << "no communication expected";
    return {};
  }
  int rank_, size_;
  std::string name_;
};

}  // namespace gpt
