// Collectives over an MPI communicator on host buffers; device buffers are staged through pinned
// host memory (which lets several ranks share one GPU in tests). Reductions of BF16 data are done
// in FP32. Every operation is a non-blocking MPI call: start_x posts it, wait() polls it until it
// completes or the --distributed-timeout-minutes deadline passes, so a rank that never arrives
// ends the job with a message naming the collective, the group and the waiting rank, never a
// silent hang. Handles must be waited on before the communicator is destroyed.
#pragma once

#include <mpi.h>

#include <memory>
#include <string>
#include <vector>

#include "core/host_staging.h"
#include "parallel/comm/communicator.h"

namespace gpt {

class MpiCommunicator final : public Communicator {
 public:
  // Contiguous messages (all-reduce, broadcast, send/receive) go as pieces of at most 2^30
  // elements, MPI's counts being ints; tests make the pieces tiny to exercise the splitting.
  static void set_message_piece_for_testing(int64_t elements);

  // Takes ownership of `comm` (freed on destruction unless it is MPI_COMM_WORLD).
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_seconds);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  // World ranks of the group's members, for messages.
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  CollectiveHandle start_all_reduce(Context& ctx, const Tensor& data, ReduceOp op) override;
  CollectiveHandle start_reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input, ReduceOp op) override;
  CollectiveHandle start_all_gather(Context& ctx, const Tensor& output, const Tensor& input) override;
  CollectiveHandle start_broadcast(Context& ctx, const Tensor& data, int root) override;
  CollectiveHandle start_exchange(Context& ctx, std::span<const PeerTransfer> transfers) override;
  void barrier(Context& ctx) override;

 private:
  class Pending;

  // Polls `requests` until all complete; fatal with a clear message at the deadline.
  void wait_requests(const char* operation, std::vector<MPI_Request>& requests);
  // `count` as MPI's int, fatal (naming the operation) beyond it.
  int checked_count(int64_t count, const char* operation) const;
  // Host staging areas are lent to an operation from start to wait, so operations in flight
  // together never share one; returned areas are reused (grow-once), so steady-state steps do not
  // allocate.
  std::unique_ptr<HostStaging> borrow_staging();
  void return_staging(std::unique_ptr<HostStaging> area);

  MPI_Comm comm_;
  std::string name_;
  double timeout_seconds_;
  int rank_ = 0;
  int size_ = 1;
  int world_rank_ = 0;
  std::vector<int> world_ranks_;
  std::vector<std::unique_ptr<HostStaging>> free_staging_;
};

}  // namespace gpt
