// Token embedding (vocab-parallel across TP) plus, with learned absolute positions, the position
// embedding, then hidden dropout (Megatron's embedding dropout). Produces the residual stream
// [s_l, b, h] from token ids in [s, b] order.
#pragma once

#include <deque>
#include <vector>

#include "model/checked_layer_shapes.h"
#include "model/layer_shapes.h"
#include "model/lease.h"
#include "model/linear.h"
#include "model/microbatch_position.h"
#include "model/param_store.h"

namespace gpt {

class EmbeddingLayer {
 public:
  EmbeddingLayer(const ModelConfig& config, ParamStore& params, const TensorParallel& tp, const LayerShapes& shapes,
                 LayerWorkspace& workspace, Arena& arena, int stash_slots,
                 const std::vector<MicrobatchPosition>& positions, int deferral_depth = 0);

  // The slot's token buffer [s * b] int32 ([s, b] order), filled by the caller before forward.
  const Tensor& tokens(int slot) const { return stash_[static_cast<size_t>(slot)].tokens; }
  Tensor forward(Context& ctx, int slot);
  // The embedding has no input gradient: its backward is all weight gradient (the dropout's
  // backward in place on grad_output, then the word and position embedding gradients), run at once
  // or, kDeferred, from a copy of grad_output in a lease by backward_weight. The slot's tokens are
  // read then: the slot must be held until its weight-gradient pass.
  void backward(Context& ctx, int slot, const Tensor& grad_output,
                WeightGradTiming timing = WeightGradTiming::kWithInputGrad);
  void backward_weight(Context& ctx);
  static int64_t deferral_bytes(const ModelConfig& config, const LayerShapes& shapes, int deferral_depth);
  // Everything the constructor takes from its arena.
  static int64_t bytes(const ModelConfig& config, const LayerShapes& shapes, int stash_slots, int deferral_depth);
  // Its stashes alone (no leases), in the arithmetic of `shapes` (model/checked_layer_shapes.h).
  template <typename Sizes>
  static BytesOf<Sizes> stash_bytes(const Sizes& shapes, DType dtype, BytesOf<Sizes> stash_slots);

 private:
  struct Stash {
    Tensor tokens;  // [s * b] int32
    Tensor output;  // [s_l, b, h]
  };
  ops::DropoutMask mask(int slot) const;
  // Rows of one segment of an [s_l, b, h] activation.
  Tensor segment_rows(const Tensor& x, const SequenceSegment& segment) const;
  // grad_output [s_l, b, h] after the dropout's backward -> the word and position gradients.
  void weight_grad(Context& ctx, int slot, const Tensor& grad_output);

  const ModelConfig& config_;
  const TensorParallel& tp_;
  LayerShapes shapes_;
  LayerWorkspace& ws_;
  Param& word_;
  Param* position_;  // null without learned absolute position embeddings
  const std::vector<MicrobatchPosition>& positions_;
  std::vector<Stash> stash_;
  LeaseRing leases_;          // deferred: copies of grad_output [s_l, b, h]
  std::deque<int> pending_;   // deferred: the slots whose weight gradient waits, oldest first
};

}  // namespace gpt
