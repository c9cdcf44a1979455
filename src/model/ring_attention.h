// Ring attention (context parallelism, --cp-comm-type p2p): each rank holds two chunks of every
// sequence (layer_shapes.h's load-balanced split) and their queries, keys and values. The K/V block
// of each rank travels around the context-parallel ring, CP - 1 hops, the next hop's transfer in
// flight while the current block is computed; each rank attends its queries to the block it holds,
// chunk against chunk: a key chunk after the query chunk is skipped (fully masked), the diagonal
// chunk is causal, an earlier chunk is full; the partial outputs merge through their log-sum-exp
// (op attention_block_forward). Backward passes the blocks around again with their key/value
// gradients travelling with them, and the gradient of each rank's own block arrives home after the
// last hop. GQA sends only the K/V groups ([s, b, groups_l, 2d] per block).
// Under --cp-comm-type a2a+p2p the ring runs inside the all-to-all (all_to_all_attention.h) on
// the head-split rows of a level-0 group: `shapes` are then those rows (head_split_shapes), whose
// two halves are again a load-balanced pair of chunks of the ring's own split.
//
//   qkv [s, b, groups_l, (q + 2) d] (s = S / CP rows of this rank), out [s, b, heads_l, d],
//   lse [b, heads_l, s]: the same contract as LocalAttention over the whole sequence.
#pragma once

#include <array>
#include <vector>

#include "model/attention_core.h"
#include "model/context_parallel.h"

namespace gpt {

class RingAttention final : public AttentionCore {
 public:
  // workspace: the chunk's shared scratch (context_qkv holds the blocks in flight).
  RingAttention(const LayerShapes& shapes, Communicator& group, const LayerWorkspace& workspace, float scale);
  // scratch: four buffers of at least [s b, groups_l 2d] elements (the blocks and gradients in flight).
  RingAttention(const LayerShapes& shapes, Communicator& group, const std::array<Tensor, 4>& scratch, float scale);
  void forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv,
               const ops::DropoutMask& dropout) const override;
  void backward_input(Context& ctx, const Tensor& grad_qkv, const Tensor& grad_out, const Tensor& qkv,
                      const Tensor& out, const Tensor& lse, const ops::DropoutMask& dropout) const override;

 private:
  // The blocks of this rank's queries against the K/V block of `owner` that are not fully masked.
  std::vector<ops::AttentionBlock> blocks(int owner) const;
  Tensor kv_buffer(int index) const;  // [s, b, groups_l, 2d] view of scratch_[index]
  // Starts sending `block` to the next rank of the ring and receiving the previous rank's into `into`.
  CollectiveHandle start_shift(Context& ctx, const Tensor& block, const Tensor& into) const;

  LayerShapes shapes_;
  Communicator& group_;
  std::array<Tensor, 4> scratch_;
  float scale_;
};

}  // namespace gpt
