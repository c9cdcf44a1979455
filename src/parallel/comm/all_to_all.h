// The variable-size all-to-all of the alltoall token dispatcher (Megatron's all_to_all with
// input/output split sizes), over any Communicator: every rank sends a block of rows to every peer
// and receives one from every peer, the block sizes differing per pair. Built on
// Communicator::start_exchange (one batch of sends and receives: MPI and Gloo post them all at
// once, NCCL inside one ncclGroupStart/End), with the rank's own block copied on `ctx` and
// zero-row blocks never posted, so it runs on the self, MPI, Gloo and NCCL communicators alike.
//
//   // send: [sum(send_rows), h], rows grouped by destination rank in group order
//   std::vector<int64_t> receive_rows = exchange_counts(ep, ctx, send_rows);  // host sync
//   Tensor receive = workspace.slice(0, sum(receive_rows));                    // [sum, h]
//   CollectiveHandle h = start_all_to_all_rows(ep, ctx, send, send_rows, receive, receive_rows);
//   ... other work ...
//   h.wait(ctx);  // receive: rows from rank 0, then rank 1, ... (each block in its sender's order)
//
// Every rank of the group must call these in the same order as its other collectives on the group.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/context.h"
#include "core/tensor.h"
#include "parallel/comm/communicator.h"

namespace gpt {

// send [sum(send_rows), width] -> receive [sum(receive_rows), width], same dtype and width, both
// on ctx.device(). send_rows[q]: rows this rank sends to group rank q (a contiguous block of
// `send`, blocks in rank order); receive_rows[q]: rows it receives from q (placed likewise in
// `receive`). receive_rows must equal what the peers send (exchange_counts gives it): the
// communicators do not check it on the wire (NCCL would read or write the wrong byte count).
// send_rows[rank()] == receive_rows[rank()]: that block is copied on `ctx`, not sent. Size and
// shape mismatches are fatal, naming the group and this rank. Neither tensor may be touched until
// the handle is waited on.
CollectiveHandle start_all_to_all_rows(Communicator& comm, Context& ctx, const Tensor& send,
                                       std::span<const int64_t> send_rows, const Tensor& receive,
                                       std::span<const int64_t> receive_rows);

inline void all_to_all_rows(Communicator& comm, Context& ctx, const Tensor& send, std::span<const int64_t> send_rows,
                            const Tensor& receive, std::span<const int64_t> receive_rows) {
  start_all_to_all_rows(comm, ctx, send, send_rows, receive, receive_rows).wait(ctx);
}

// The receive counts of an all-to-all: element q of the result is what group rank q passed as its
// send_rows[rank()]. A fixed-size all-to-all of one int64 per pair (start_all_to_all_rows with one
// row per peer), so it costs size() tiny messages, not a gathered size() x size() matrix.
// The counts travel in a tensor on ctx.device(): on a GPU context the communicator may be NCCL,
// which moves only device memory (MPI and Gloo stage device tensors through the host, so the same
// tensor serves them); on the CPU the tensor is host memory. The host learns the counts only after
// the exchange and a copy back, so this synchronizes ctx's stream (as Megatron's .cpu() of the
// counts does). `workspace`: int64 [2 * size()] on ctx.device(), from the caller's arena, so
// that the training step allocates nothing; the form without it allocates a small buffer per call
// (for tests and set-up).
std::vector<int64_t> exchange_counts(Communicator& comm, Context& ctx, std::span<const int64_t> send_rows,
                                     const Tensor& workspace);
std::vector<int64_t> exchange_counts(Communicator& comm, Context& ctx, std::span<const int64_t> send_rows);

}  // namespace gpt
