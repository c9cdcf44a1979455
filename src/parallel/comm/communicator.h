// One interface for the collectives the system uses, over a group of ranks. Implementations: self
// (a group of one), MPI (host buffers; device buffers staged through pinned host memory) and NCCL
// (device buffers on its own stream).
//
// Every collective comes in two forms. start_x(...) begins it and returns a handle; the caller
// does other work and calls handle.wait(ctx) before it touches the buffers again. x(...) is
// start_x(...).wait(ctx). Several operations may be in flight at once, on one group or several,
// provided every rank of a group starts that group's operations in the same order. Waits stay
// bounded by the group's timeout (--distributed-timeout-minutes).
//
//   CollectiveHandle grads = dp.start_all_reduce(ctx, bucket, ReduceOp::kSum);
//   ... more backward work on other buffers ...
//   grads.wait(ctx);  // NCCL: the stream waits; MPI: the host waits and copies back
#pragma once

#include <memory>
#include <span>
#include <string>

#include "core/context.h"
#include "core/tensor.h"

namespace gpt {

enum class ReduceOp { kSum, kMax };

// One half of a point-to-point exchange; a batch of these is posted together so that a send and a
// receive that depend on each other cannot deadlock.
struct PeerTransfer {
  enum class Kind { kSend, kReceive };
  Kind kind;
  Tensor tensor;
  int peer;  // rank within this communicator's group
};

// An operation in flight, as an implementation keeps it.
class PendingCollective {
 public:
  virtual ~PendingCollective() = default;
  // Completes the operation for the caller: afterwards, work the caller queues on `ctx` (or does
  // on the host, for host buffers) sees the result. Called once.
  virtual void wait(Context& ctx) = 0;
  // Lets the operation advance without waiting for it (MPI progresses only inside MPI calls;
  // NCCL and self need nothing). Cheap; callers may call it between pieces of other work.
  virtual void progress() {}
  // What it is, for messages: "all_reduce on group 'data-parallel'".
  virtual std::string describe() const = 0;
};

// The caller's side of an operation in flight. Move-only; an empty handle (default-constructed,
// moved from, or already waited on) waits for nothing. Dropping a handle without waiting is a
// broken invariant: the buffers would be in use with nobody to say when they are free.
class [[nodiscard]] CollectiveHandle {
 public:
  CollectiveHandle() = default;
  explicit CollectiveHandle(std::unique_ptr<PendingCollective> pending) : pending_(std::move(pending)) {}
  CollectiveHandle(CollectiveHandle&& other) noexcept = default;
  CollectiveHandle& operator=(CollectiveHandle&& other) noexcept;
  CollectiveHandle(const CollectiveHandle&) = delete;
  CollectiveHandle& operator=(const CollectiveHandle&) = delete;
  ~CollectiveHandle();

  // NCCL: `ctx`'s stream waits for the operation (the host does not). MPI: the host waits, within
  // the group's timeout, and copies device results back on `ctx`'s stream. Self: nothing.
  void wait(Context& ctx);
  // See PendingCollective::progress; nothing for an empty handle.
  void progress() {
    if (pending_) pending_->progress();
  }
  bool pending() const { return pending_ != nullptr; }

 private:
  std::unique_ptr<PendingCollective> pending_;
};

class Communicator {
 public:
  virtual ~Communicator() = default;

  // Rank within the group and group size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's name for messages ("tensor-parallel", "data-parallel", ...).
  virtual const std::string& name() const = 0;

  // The operation reads its inputs after the work already queued on `ctx`; until wait(), neither
  // the caller nor its stream may write the buffers (or read the outputs).
  // In place over `data` on every rank.
  virtual CollectiveHandle start_all_reduce(Context& ctx, const Tensor& data, ReduceOp op) = 0;
  // input [size * n] (rank r's result is block r) -> output [n].
  virtual CollectiveHandle start_reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input,
                                                ReduceOp op) = 0;
  // input [n] -> output [size * n], block r from rank r.
  virtual CollectiveHandle start_all_gather(Context& ctx, const Tensor& output, const Tensor& input) = 0;
  virtual CollectiveHandle start_broadcast(Context& ctx, const Tensor& data, int root) = 0;
  virtual CollectiveHandle start_exchange(Context& ctx, std::span<const PeerTransfer> transfers) = 0;

  // Blocking forms: start and wait.
  void all_reduce(Context& ctx, const Tensor& data, ReduceOp op) { start_all_reduce(ctx, data, op).wait(ctx); }
  void reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input, ReduceOp op) {
    start_reduce_scatter(ctx, output, input, op).wait(ctx);
  }
  void all_gather(Context& ctx, const Tensor& output, const Tensor& input) {
    start_all_gather(ctx, output, input).wait(ctx);
  }
  void broadcast(Context& ctx, const Tensor& data, int root) { start_broadcast(ctx, data, root).wait(ctx); }
  void exchange(Context& ctx, std::span<const PeerTransfer> transfers) { start_exchange(ctx, transfers).wait(ctx); }
  // Returns when every rank of the group has entered it (and, on a GPU, when this rank's queued
  // work is done).
  virtual void barrier(Context& ctx) = 0;
};

}  // namespace gpt
