// The attention core of a transformer layer: causal softmax(q k^T * scale) v over this rank's
// query heads, each reading its group's key and value (GQA), with attention-probability dropout.
// A module without parameters, so its two passes are forward and the input gradient. The layer
// sees only this interface: context parallelism (attention over a sequence split across ranks)
// and a KV cache (generation) are other implementations of it.
//
//   qkv  [s, b, groups_l, (q + 2) d]  (Megatron's packing; queries rotated by RoPE already)
//   out  [s, b, heads_l, d],  lse [b, heads_l, s] float32 (kept for backward)
#pragma once

#include <memory>

#include "kernels/ops.h"
#include "model/layer_shapes.h"

namespace gpt {

class AttentionCore {
 public:
  virtual ~AttentionCore() = default;
  virtual void forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                       const ops::DropoutMask& dropout) const = 0;
  // grad_qkv [s, b, groups_l, (q + 2) d] from grad_out [s, b, heads_l, d] and the forward's qkv,
  // out and lse (and the same dropout mask).
  virtual void backward_input(Context& ctx, const Tensor& grad_qkv, const Tensor& grad_out, const Tensor& qkv,
                              const Tensor& out, const Tensor& lse, const ops::DropoutMask& dropout) const = 0;
};

// The whole sequence on this rank: the op set's attention (cuDNN's fused kernel where the build
// and the configuration allow it, the exact reference kernels otherwise; kernels/ops.h decides).
class LocalAttention final : public AttentionCore {
 public:
  explicit LocalAttention(float scale) : scale_(scale) {}
  void forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv,
               const ops::DropoutMask& dropout) const override {
    ops::attention_forward(ctx, out, lse, qkv, scale_, dropout);
  }
  void backward_input(Context& ctx, const Tensor& grad_qkv, const Tensor& grad_out, const Tensor& qkv,
                      const Tensor& out, const Tensor& lse, const ops::DropoutMask& dropout) const override {
    ops::attention_backward(ctx, grad_qkv, grad_out, qkv, out, lse, scale_, dropout);
  }

 private:
  float scale_;
};

struct ContextParallel;

// The core a layer of these shapes uses (1 / sqrt(d) scaling): LocalAttention, or under context
// parallelism the layer's --cp-comm-type (ring or all-to-all, reading the chunk's workspace).
std::unique_ptr<AttentionCore> make_attention_core(const LayerShapes& shapes, const LayerWorkspace& workspace,
                                                   const ContextParallel& context, int64_t layer);

}  // namespace gpt
