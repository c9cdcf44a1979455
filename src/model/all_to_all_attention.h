// All-to-all attention (context parallelism, --cp-comm-type a2a, DeepSpeed-Ulysses style): an
// all-to-all over the context-parallel group turns this rank's rows of every head into the whole
// sequence of 1 / CP of the heads (its key/value groups with their query heads), in global order;
// the ordinary causal attention (LocalAttention's op) runs on them; a second all-to-all brings the
// output back to this rank's rows of every head. Backward redoes the first exchange for qkv, out and
// the output gradient, and sends the qkv gradient back. Needs groups_l (and so heads_l) divisible
// by CP. The lse is kept in the head-split layout [b, heads_l / CP, S] (the same size as
// [b, heads_l, s]): only this core reads it.
//
//   qkv [s, b, groups_l, (q + 2) d], out [s, b, heads_l, d] (s = S / CP rows of this rank).
#pragma once

#include "model/attention_core.h"
#include "model/context_parallel.h"

namespace gpt {

class AllToAllAttention final : public AttentionCore {
 public:
  AllToAllAttention(const LayerShapes& shapes, Communicator& group, const LayerWorkspace& workspace, float scale);
  void forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv,
               const ops::DropoutMask& dropout) const override;
  void backward_input(Context& ctx, const Tensor& grad_qkv, const Tensor& grad_out, const Tensor& qkv,
                      const Tensor& out, const Tensor& lse, const ops::DropoutMask& dropout) const override;

 private:
  // local [s, b, CP x columns] (this rank's rows, every peer's columns) -> gathered [S, b, columns]
  // (the whole sequence of this rank's columns), through `staging` (>= local's elements).
  void sequence_to_heads(Context& ctx, const Tensor& gathered, const Tensor& local, const Tensor& staging) const;
  // The inverse: gathered [S, b, columns] -> local [s, b, CP x columns].
  void heads_to_sequence(Context& ctx, const Tensor& local, const Tensor& gathered, const Tensor& staging) const;
  // The two chunks of peer p's rows inside a [S, ...] tensor (layer_shapes.h's split).
  Tensor chunk_of(const Tensor& whole, int peer, int half) const;
  ops::DropoutMask head_split(const ops::DropoutMask& dropout) const;
  Tensor gathered_qkv(const Tensor& buffer) const;
  Tensor gathered_out(const Tensor& buffer) const;

  LayerShapes shapes_;
  Communicator& group_;
  const LayerWorkspace& workspace_;
  LocalAttention local_;
};

}  // namespace gpt
