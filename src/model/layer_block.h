// What the blocks of a transformer layer (model/attention_block.h, model/mlp_block.h) share: what
// they are built from, what they hand back to the layer, and the layer's dropout sites.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "kernels/ops.h"
#include "model/context_parallel.h"
#include "model/expert_parallel.h"
#include "model/layer_shapes.h"
#include "model/linear.h"
#include "model/microbatch_position.h"
#include "model/param_store.h"

namespace gpt {

// What a block is built from: the layer's place, parameters, parallel groups, scratch and arena.
struct BlockBuild {
  const ModelConfig& config;
  int64_t layer;  // the global layer number
  ParamStore& params;
  const TensorParallel& tp;
  const LayerShapes& shapes;
  LayerWorkspace& workspace;
  Arena& arena;                                       // the linears' deferral leases
  int deferral_depth;                                 // weight gradients that may wait at once
  const ContextParallel& context;
  Fp8Scaling* fp8;                                    // null without FP8
  const std::vector<MicrobatchPosition>& positions;   // the chunk's per-slot microbatch positions
  const ExpertParallel* experts = nullptr;            // the expert grid (null: no expert parallelism)

  // "decoder.layers.<layer>.": the prefix of the layer's parameter names.
  std::string prefix() const;
  // One of the layer's linears: prefix + module + ".weight", and ".bias" where the registry has
  // one (unless --disable-bias-linear; linear_qkv's also with --add-qkv-bias). `fp8_slot`: its index in the layer (FP8's state: qkv 0, proj 1, fc1 2,
  // fc2 3); FP8 reduces the activations' amax over the context-parallel group.
  Linear linear(const std::string& module, LinearKind kind, int fp8_slot) const;
};

// What a block adds to the residual stream: `delta` [s_l, b, h] (in the chunk's workspace, read at
// once by the layer) plus `bias` [h], the bias still to add with it (undefined when there is none
// or when dropout has added it already: Megatron's bias-dropout-add). The layer fuses the add into
// the second norm or the final residual add.
struct BlockOutput {
  Tensor delta;
  Tensor bias;
};

// The layer's dropout sites: the slot's mask of a site, and hidden dropout over the residual
// stream's rows [s_l, b, h], each run of consecutive global tokens keyed by its own first token
// (layer_shapes.h's segments: context parallelism's chunks, SP's shard), so that every layout drops
// the same elements and backward regenerates them.
class LayerDropout {
 public:
  LayerDropout(const ModelConfig& config, int64_t layer, const LayerShapes& shapes,
               const std::vector<MicrobatchPosition>& positions)
      : config_(config), layer_(layer), shapes_(shapes), positions_(positions) {}

  // The slot's mask of one site (probability 0 outside training or without dropout).
  ops::DropoutMask mask(int slot, ops::DropoutSite site) const;
  bool enabled(int slot, ops::DropoutSite site) const { return mask(slot, site).enabled(); }
  // A row-parallel output `out` [s_l, b, h] with its `bias` through the site's hidden dropout: in
  // place when the site drops (the bias added inside it), untouched otherwise (the bias handed on).
  BlockOutput forward(Context& ctx, int slot, ops::DropoutSite site, const Tensor& out, const Tensor& bias) const;
  // dx [s_l, b, h] = the gradient through the site's hidden dropout of dy [s_l, b, h].
  void backward(Context& ctx, int slot, ops::DropoutSite site, const Tensor& dx, const Tensor& dy) const;

 private:
  Tensor residual_rows(const Tensor& x) const;  // [s_l, b, h] view

  const ModelConfig& config_;
  int64_t layer_;
  LayerShapes shapes_;
  const std::vector<MicrobatchPosition>& positions_;
};

}  // namespace gpt
