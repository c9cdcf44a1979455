// One interface for the collectives the system uses, over a group of ranks. Implementations: self
// (a group of one), MPI (host buffers; device buffers staged through pinned host memory) and NCCL
// (device buffers on its own stream). All operations are blocking from the caller's view and
// ordered with the context's stream.
#pragma once

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

class Communicator {
 public:
  virtual ~Communicator() = default;

  // Rank within the group and group size.
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // The group's name for messages ("tensor-parallel", "data-parallel", ...).
  virtual const std::string& name() const = 0;

  // In place over `data` on every rank.
  virtual void all_reduce(Context& ctx, const Tensor& data, ReduceOp op) = 0;
  // input [size * n] (rank r's result is block r) -> output [n].
  virtual void reduce_scatter(Context& ctx, const Tensor& output, const Tensor& input, ReduceOp op) = 0;
  // input [n] -> output [size * n], block r from rank r.
  virtual void all_gather(Context& ctx, const Tensor& output, const Tensor& input) = 0;
  virtual void broadcast(Context& ctx, const Tensor& data, int root) = 0;
  virtual void exchange(Context& ctx, std::span<const PeerTransfer> transfers) = 0;
  virtual void barrier(Context& ctx) = 0;
};

}  // namespace gpt
