// All-to-all attention (context parallelism, --cp-comm-type a2a, DeepSpeed-Ulysses style): an
// all-to-all over the context-parallel group turns this rank's rows of every head into the whole
// sequence of 1 / CP of the heads (its key/value groups with their query heads), in global order;
// the ordinary causal attention (LocalAttention's op) runs on them; a second all-to-all brings the
// output back to this rank's rows of every head. Backward redoes the first exchange for qkv, out and
// the output gradient, and sends the qkv gradient back. Needs groups_l (and so heads_l) divisible
// by CP. The lse is kept in the head-split layout [b, heads_l / CP, S] (the same size as
// [b, heads_l, s]): only this core reads it.
//
// --cp-comm-type a2a+p2p (Transformer Engine's hierarchical form, --hierarchical-context-parallel-sizes
// [A, P]): the all-to-all runs over the level-0 group of A consecutive context ranks only, giving
// each the rows of those A ranks (2 A chunks: the first chunks of its members in order, then their
// second chunks in reverse, i.e. two runs of consecutive positions) of 1 / A of the heads; ring
// attention (ring_attention.h) over the level-1 group of P ranks attends them, each run being one
// chunk of the ring's load-balanced split of the sequence into 2 P chunks; the inverse all-to-all
// follows. With A = CP (no ring) this is the all-to-all above.
//
//   qkv [s, b, groups_l, (q + 2) d], out [s, b, heads_l, d] (s = S / CP rows of this rank).
#pragma once

#include <memory>

#include "model/attention_core.h"
#include "model/context_parallel.h"

namespace gpt {

// The shapes the level-1 ring sees after the all-to-all over `inner_size` ranks: s x inner_size
// rows of heads_l / inner_size heads (groups likewise), context rank `outer_rank` of CP / inner_size.
LayerShapes head_split_shapes(const LayerShapes& shapes, int64_t inner_size, int64_t outer_rank);

class AllToAllAttention final : public AttentionCore {
 public:
  // group: the all-to-all's ranks (the whole context group, or a2a+p2p's level 0); ring: a2a+p2p's
  // level 1 (null for a2a), whose blocks use the workspace's context_kv.
  AllToAllAttention(const LayerShapes& shapes, Communicator& group, const LayerWorkspace& workspace, float scale,
                    Communicator* ring = nullptr);
  void forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv,
               const ops::DropoutMask& dropout) const override;
  void backward_input(Context& ctx, const Tensor& grad_qkv, const Tensor& grad_out, const Tensor& qkv,
                      const Tensor& out, const Tensor& lse, const ops::DropoutMask& dropout) const override;

 private:
  // local [s, b, A x columns] (this rank's rows, every peer's columns) -> gathered [s A, b, columns]
  // (the A peers' rows of this rank's columns), through `staging` (>= local's elements).
  void sequence_to_heads(Context& ctx, const Tensor& gathered, const Tensor& local, const Tensor& staging) const;
  // The inverse: gathered [s A, b, columns] -> local [s, b, A x columns].
  void heads_to_sequence(Context& ctx, const Tensor& local, const Tensor& gathered, const Tensor& staging) const;
  // The two chunks of peer p's rows inside a gathered [s A, ...] tensor: p and 2 A - 1 - p (with
  // A = CP exactly layer_shapes.h's split, the whole sequence in global order).
  Tensor chunk_of(const Tensor& whole, int peer, int half) const;
  ops::DropoutMask head_split(const ops::DropoutMask& dropout) const;
  Tensor gathered_qkv(const Tensor& buffer) const;
  Tensor gathered_out(const Tensor& buffer) const;
  int64_t gathered_rows() const { return shapes_.sequence * group_.size(); }

  LayerShapes shapes_;
  Communicator& group_;
  const LayerWorkspace& workspace_;
  std::unique_ptr<AttentionCore> inner_;  // on the gathered rows: LocalAttention, or the a2a+p2p ring
};

}  // namespace gpt
