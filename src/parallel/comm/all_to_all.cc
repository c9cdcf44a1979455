#include "parallel/comm/all_to_all.h"

#include <string>

#include "core/check.h"
#include "core/memory.h"
#include "core/stream_copy.h"
#include "kernels/ops.h"

namespace gpt {
namespace {

// "group 'expert-exchange' (rank 2 of 4)": every message names where it failed.
std::string where(const Communicator& comm) {
  return "group '" + comm.name() + "' (rank " + std::to_string(comm.rank()) + " of " + std::to_string(comm.size()) +
         ")";
}

// Row offsets of the blocks: offsets[q] = sum(rows[0..q)), offsets[size] = the total. Fatal on a
// negative count or a total that is not the tensor's row count.
std::vector<int64_t> block_offsets(const Communicator& comm, std::span<const int64_t> rows, const Tensor& tensor,
                                   const char* side) {
  GPT_CHECK_EQ(static_cast<int64_t>(rows.size()), static_cast<int64_t>(comm.size()))
      << "all_to_all_rows on " << where(comm) << ": " << side << "_rows has " << rows.size()
      << " counts, one per rank of the group expected";
  std::vector<int64_t> offsets(rows.size() + 1, 0);
  for (size_t q = 0; q < rows.size(); ++q) {
    GPT_CHECK_GE(rows[q], 0) << "all_to_all_rows on " << where(comm) << ": " << side << "_rows[" << q
                             << "] is negative";
    offsets[q + 1] = offsets[q] + rows[q];
  }
  GPT_CHECK_EQ(offsets.back(), tensor.size(0))
      << "all_to_all_rows on " << where(comm) << ": the " << side << " counts add up to " << offsets.back()
      << " rows but the " << side << " tensor is " << tensor.to_string();
  return offsets;
}

void check_tensors(const Communicator& comm, const Context& ctx, const Tensor& send, const Tensor& receive) {
  GPT_CHECK(send.rank() == 2 && receive.rank() == 2)
      << "all_to_all_rows on " << where(comm) << ": send " << send.to_string() << " and receive "
      << receive.to_string() << " must be [rows, width] matrices";
  GPT_CHECK(send.size(1) == receive.size(1) && send.dtype() == receive.dtype())
      << "all_to_all_rows on " << where(comm) << ": send " << send.to_string() << " and receive "
      << receive.to_string() << " differ in width or dtype";
  GPT_CHECK(send.device() == ctx.device() && receive.device() == ctx.device())
      << "all_to_all_rows on " << where(comm) << ": send " << send.to_string() << " and receive "
      << receive.to_string() << " must be on the context's device (" << device_name(ctx.device()) << ")";
}

}  // namespace

CollectiveHandle start_all_to_all_rows(Communicator& comm, Context& ctx, const Tensor& send,
                                       std::span<const int64_t> send_rows, const Tensor& receive,
                                       std::span<const int64_t> receive_rows) {
  check_tensors(comm, ctx, send, receive);
  const std::vector<int64_t> send_at = block_offsets(comm, send_rows, send, "send");
  const std::vector<int64_t> receive_at = block_offsets(comm, receive_rows, receive, "receive");
  const int size = comm.size(), me = comm.rank();
  GPT_CHECK_EQ(send_rows[me], receive_rows[me])
      << "all_to_all_rows on " << where(comm) << ": the block this rank sends itself and the one it receives from "
      << "itself differ";
  // Peers in ring order from this rank (send to me + k, receive from me - k): at every step of the
  // batch the ranks talk to distinct peers, whatever the backend does with the posting order.
  std::vector<PeerTransfer> transfers;
  transfers.reserve(2 * static_cast<size_t>(size));
  for (int k = 1; k < size; ++k) {
    const int to = (me + k) % size, from = (me - k + size) % size;
    if (send_rows[to] > 0) {
      transfers.push_back({PeerTransfer::Kind::kSend, send.slice(send_at[to], send_at[to + 1]), to});
    }
    if (receive_rows[from] > 0) {
      transfers.push_back({PeerTransfer::Kind::kReceive, receive.slice(receive_at[from], receive_at[from + 1]), from});
    }
  }
  CollectiveHandle handle;
  if (!transfers.empty()) handle = comm.start_exchange(ctx, transfers);
  // Queued after start_exchange, so that NCCL's stream does not wait for it: the copy overlaps the
  // transfers.
  if (send_rows[me] > 0) {
    ops::copy(ctx, receive.slice(receive_at[me], receive_at[me + 1]), send.slice(send_at[me], send_at[me + 1]));
  }
  return handle;
}

std::vector<int64_t> exchange_counts(Communicator& comm, Context& ctx, std::span<const int64_t> send_rows,
                                     const Tensor& workspace) {
  const int64_t size = comm.size();
  GPT_CHECK_EQ(static_cast<int64_t>(send_rows.size()), size)
      << "exchange_counts on " << where(comm) << ": " << send_rows.size()
      << " send counts, one per rank of the group expected";
  GPT_CHECK(workspace.dtype() == DType::kInt64 && workspace.numel() == 2 * size && workspace.device() == ctx.device())
      << "exchange_counts on " << where(comm) << ": the workspace " << workspace.to_string() << " must be int64 ["
      << 2 * size << "] on the context's device (" << device_name(ctx.device()) << ")";
  const Tensor counts = workspace.view({2 * size, 1});
  const Tensor outgoing = counts.slice(0, size), incoming = counts.slice(size, 2 * size);
  copy_to_device(ctx, outgoing, send_rows);
  const std::vector<int64_t> one_each(static_cast<size_t>(size), 1);
  all_to_all_rows(comm, ctx, outgoing, one_each, incoming, one_each);
  std::vector<int64_t> receive_rows(static_cast<size_t>(size));
  copy_to_host(ctx, receive_rows.data(), incoming);
  ctx.synchronize();
  for (int64_t q = 0; q < size; ++q) {
    GPT_CHECK_GE(receive_rows[static_cast<size_t>(q)], 0)
        << "exchange_counts on " << where(comm) << ": rank " << q << " of the group sends a negative row count";
  }
  return receive_rows;
}

std::vector<int64_t> exchange_counts(Communicator& comm, Context& ctx, std::span<const int64_t> send_rows) {
  const int64_t elements = 2 * static_cast<int64_t>(comm.size());
  if (ctx.device() == Device::kCpu) {
    std::vector<int64_t> host(static_cast<size_t>(elements));
    return exchange_counts(comm, ctx, send_rows, Tensor(host.data(), DType::kInt64, Shape({elements}), Device::kCpu));
  }
  Buffer buffer(ctx.device(), static_cast<size_t>(elements) * sizeof(int64_t));
  return exchange_counts(comm, ctx, send_rows, buffer.as_tensor(DType::kInt64, {elements}));
}

}  // namespace gpt
