// Token embedding (vocab-parallel across TP) plus, with learned absolute positions, the position
// embedding, then hidden dropout (Megatron's embedding dropout). Produces the residual stream
// [s_l, b, h] from token ids in [s, b] order.
#pragma once

#include <vector>

#include "model/layer_shapes.h"
#include "model/microbatch_position.h"
#include "model/param_store.h"

namespace gpt {

class EmbeddingLayer {
 public:
  EmbeddingLayer(const ModelConfig& config, ParamStore& params, const TensorParallel& tp, const LayerShapes& shapes,
                 LayerWorkspace& workspace, Arena& arena, int stash_slots,
                 const std::vector<MicrobatchPosition>& positions);

  // The slot's token buffer [s * b] int32 ([s, b] order), filled by the caller before forward.
  const Tensor& tokens(int slot) const { return stash_[static_cast<size_t>(slot)].tokens; }
  Tensor forward(Context& ctx, int slot);
  void backward(Context& ctx, int slot, const Tensor& grad_output);

 private:
  struct Stash {
    Tensor tokens;  // [s * b] int32
    Tensor output;  // [s_l, b, h]
  };
  ops::DropoutMask mask(int slot) const;

  const ModelConfig& config_;
  const TensorParallel& tp_;
  LayerShapes shapes_;
  LayerWorkspace& ws_;
  Param& word_;
  Param* position_;  // null without learned absolute position embeddings
  const std::vector<MicrobatchPosition>& positions_;
  std::vector<Stash> stash_;
};

}  // namespace gpt
