// Final norm (LayerNorm or RMSNorm), the LM head (vocab-parallel: each TP rank computes the logits of its vocabulary
// shard, tied to the word embedding unless --untie-embeddings-and-output-weights) and the
// vocab-parallel softmax cross-entropy. The full logits are never gathered: TP ranks exchange only
// per-row maxima and sums. With gradients requested, forward overwrites the logits with their
// gradient right away (the loss gradient is known), so backward needs no extra copy of them.
#pragma once

#include <optional>
#include <vector>

#include "model/checked_layer_shapes.h"
#include "model/layer_shapes.h"
#include "model/linear.h"
#include "model/norm.h"
#include "model/param_store.h"

namespace gpt {

// Where the last chunk's forward puts the loss: the summed token losses are added to `sum` ([1]
// float32). In training, `gradient_scale` is set and forward prepares d(scale * sum of losses) for
// backward; in evaluation it is absent and no gradient is prepared.
struct LossAccumulator {
  Tensor sum;
  std::optional<float> gradient_scale;
};

class OutputLayer {
 public:
  OutputLayer(const ModelConfig& config, ParamStore& params, const TensorParallel& tp, const LayerShapes& shapes,
              LayerWorkspace& workspace, Arena& arena, int stash_slots, int deferral_depth = 0);

  // The slot's target buffer [s * b] int32 ([s, b] order), filled by the caller before forward.
  const Tensor& targets(int slot) const { return stash_[static_cast<size_t>(slot)].targets; }

  // input [s_l, b, h]. Adds the sum of the per-token losses to loss.sum; in training prepares the
  // logits' gradient for backward (see LossAccumulator).
  void forward(Context& ctx, int slot, const Tensor& input, const LossAccumulator& loss);
  // The input-gradient pass: grad_input [s_l, b, h] receives the gradient of the input; the LM
  // head's weight gradient runs inside it or waits for backward_weight (model/linear.h).
  Tensor backward(Context& ctx, int slot, const Tensor& grad_input,
                  WeightGradTiming timing = WeightGradTiming::kWithInputGrad);
  // The LM head's weight gradient of the oldest deferred backward.
  void backward_weight(Context& ctx) { head_.backward_weight(ctx); }
  // Bytes of the LM head's weight-gradient leases (model/linear.h).
  static int64_t deferral_bytes(const ModelConfig& config, const LayerShapes& shapes, bool sequence_parallel,
                                int deferral_depth);
  // Everything the constructor takes from its arena.
  static int64_t bytes(const ModelConfig& config, const LayerShapes& shapes, bool sequence_parallel, int stash_slots,
                       int deferral_depth);
  // The same less the leases: the loss statistics and the stashes, in the arithmetic of `shapes`
  // (model/checked_layer_shapes.h).
  template <typename Sizes>
  static BytesOf<Sizes> stash_bytes(const Sizes& shapes, DType dtype, BytesOf<Sizes> stash_slots);

  // The logits [s * b, v_l] of the slot's last forward without gradient (for tests and the oracle).
  const Tensor& logits(int slot) const { return stash_[static_cast<size_t>(slot)].logits; }

 private:
  struct Stash {
    Tensor targets;               // [s * b] int32
    Tensor input;                 // [s_l, b, h] view
    Tensor norm, mean, rstd;      // [s_l, b, h], [s_l b] x2 (mean: LayerNorm only)
    Tensor logits;                // [s * b, v_l]: logits, then their gradient
  };
  const TensorParallel& tp_;
  LayerShapes shapes_;
  LayerWorkspace& ws_;
  Norm norm_;    // decoder.final_layernorm
  Linear head_;  // column-parallel over the vocabulary: output_layer.weight, or the tied word embedding
  // Per-row cross-entropy statistics of the microbatch in flight [s * b] (float32).
  Tensor row_max_, global_max_, row_sumexp_, target_logit_, row_loss_;
  std::vector<Stash> stash_;
};

}  // namespace gpt
