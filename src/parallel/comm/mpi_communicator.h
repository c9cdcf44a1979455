// Collectives over an MPI communicator on host buffers; device buffers are staged through pinned
// host memory (which lets several ranks share one GPU in tests). Reductions of BF16 data are done
// in FP32. Every operation is a non-blocking MPI call polled until it completes or the
// --distributed-timeout-minutes deadline passes; a rank that never arrives therefore ends the
// job with a message naming the collective, the group and the waiting rank, never a silent hang.
#pragma once

#include <mpi.h>

#include <string>
#include <vector>

#include "core/host_staging.h"
#include "parallel/comm/communicator.h"

namespace gpt {

class MpiCommunicator final : public Communicator {
 public:
  // Takes ownership of `comm` (freed on destruction unless it is MPI_COMM_WORLD).
  MpiCommunicator(MPI_Comm comm, std::string name, double timeout_seconds);
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  // World ranks of the group's members, for messages.
  const std::vector<int>& world_ranks() const { return world_ranks_; }

  void all_reduce(Context& ctx, const Tensor& data, ReduceOp op) override;
  void reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input, ReduceOp op) override;
  void all_gather(Context& ctx, const Tensor& output, const Tensor& input) override;
  void broadcast(Context& ctx, const Tensor& data, int root) override;
  void exchange(Context& ctx, std::span<const PeerTransfer> transfers) override;
  void barrier(Context& ctx) override;

 private:
  // Host view of `t` in the dtype MPI operates on (FP32 for BF16 reductions): the tensor itself
  // when it is a host tensor of that dtype, else a staging copy. `slot` picks a staging area.
  struct Staged {
    void* data;
    MPI_Datatype type;
    bool copied;
  };
  Staged stage_in(Context& ctx, const Tensor& t, int slot, bool widen_bf16, bool copy_contents);
  void stage_out(Context& ctx, const Tensor& t, const Staged& staged);
  // BF16 elements of `t` readable on the host (the tensor itself, or a copy in staging slot 2).
  const bf16* host_bf16(const Tensor& t);
  // Polls `requests` until all complete; fatal with a clear message at the deadline.
  void wait(const char* operation, std::vector<MPI_Request>& requests);

  MPI_Comm comm_;
  std::string name_;
  double timeout_seconds_;
  int rank_ = 0;
  int size_ = 1;
  int world_rank_ = 0;
  std::vector<int> world_ranks_;
  std::vector<HostStaging> transfer_staging_;  // one per concurrent point-to-point transfer
  std::vector<HostStaging> staging_;  // grow-once host buffers: [0], [1] operands, [2] BF16 bits
};

}  // namespace gpt
