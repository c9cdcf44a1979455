// The two sums of gradients over a model-parallel group that data parallelism does besides its own
// reduction, written once for every strategy: each sums a list of pieces (flat ranges, read through
// ParamStore::grads_in) of the gradient storage, so the same code serves the full gradients
// (ZeRO-0/1: a piece per parameter, before the data-parallel reduction) and the shards (ZeRO-2/3:
// this rank's parts of them, after the reduce-scatter; sums commute with it, the flat layout is
// the same on every TP rank, and the tied embedding's own bucket is the same on both stages).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "core/arena.h"
#include "core/context.h"
#include "model/param_store.h"
#include "parallel/comm/communicator.h"
#include "parallel/data_parallel/range.h"
#include "parallel/process_grid.h"
#include "parallel/tensor_parallel/regions.h"

namespace gpt {

// Replicated parameters whose gradient each TP rank computes from part of the work, summed over
// TP before the data-parallel reduction: those fed by the sequence-split stream under sequence
// parallelism, and --qk-layernorm's norms (each rank normalizes only its heads) in every layout.
bool summed_over_tensor_parallel(const ParamSpec& spec, const TensorParallel& tp);

// The store's parameters summed over TP, in flat order.
std::vector<const Param*> tensor_parallel_summed(const ParamStore& params, const TensorParallel& tp);

// This rank's parts of `flat` in its owned ranges (ShardPlan::owned, in their order): the pieces of
// a parameter in the gradient shards.
void append_owned_pieces(const ShardPlan& plan, Range flat, std::vector<Range>& pieces);

// The sum over TP of the gradients of the parameters summed_over_tensor_parallel: pieces copied
// into one float32 staging buffer [the summed parameters' elements], one all-reduce, copied back.
// Each piece once per iteration, however many calls name it.
class TensorParallelSum {
 public:
  // `pieces`: ranges of the flat gradients, in the order sum_remaining() takes them.
  TensorParallelSum(const TensorParallel& tp, const ParamStore& params, std::vector<Range> pieces, Arena& arena);

  // Every piece unsummed again (before the iteration's first backward).
  void start_iteration();
  // Sums the pieces `indices` (into the constructor's list) not summed yet this iteration, in the
  // order given, in one all-reduce; nothing when none is left.
  void sum(Context& ctx, std::span<const int> indices);
  // Sums every piece not summed yet this iteration, in list order.
  void sum_remaining(Context& ctx);

 private:
  const TensorParallel& tp_;
  const ParamStore& params_;
  std::vector<Range> pieces_;
  std::vector<char> summed_;    // [piece] this iteration
  std::vector<int> pending_;    // one call's pieces (capacity kept: no allocation per call)
  std::vector<int> all_;        // 0 .. pieces - 1
  Tensor staging_;              // float32 [the summed parameters' elements]
};

// The two copies of the tied word embedding (first and last pipeline stage) take the sum of their
// gradients over the embedding group, so that they stay equal: once per iteration, before the
// data-parallel reduction of its bucket (which never starts earlier), or on the shards after it.
class TiedEmbeddingSum {
 public:
  // `tied_across_stages`: the copies are on two stages; nothing is summed otherwise, or where the
  // embedding group is this rank alone. `in_shards`: the word embedding's parts in this rank's
  // owned ranges (ZeRO-2/3), else the whole parameter.
  TiedEmbeddingSum(ProcessGrid& grid, const ParamStore& params, bool tied_across_stages, bool in_shards);

  void start_iteration() { summed_ = false; }
  void sum(Context& ctx);

 private:
  ProcessGrid& grid_;
  const ParamStore& params_;
  std::vector<Range> pieces_;  // empty: nothing to sum
  bool summed_ = false;
};

}  // namespace gpt
