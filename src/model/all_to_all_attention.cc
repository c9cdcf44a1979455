#include "model/all_to_all_attention.h"

#include <array>
#include <vector>

#include "model/ring_attention.h"

namespace gpt {

LayerShapes head_split_shapes(const LayerShapes& shapes, int64_t inner_size, int64_t outer_rank) {
  GPT_CHECK(inner_size >= 1 && shapes.context_size % inner_size == 0 && shapes.local_groups % inner_size == 0)
      << "a2a+p2p level 0 of " << inner_size << " ranks: CP " << shapes.context_size << ", groups per rank "
      << shapes.local_groups;
  LayerShapes split = shapes;
  split.sequence = shapes.sequence * inner_size;
  split.local_sequence = split.sequence;
  split.sequence_offset = 0;
  split.context_size = shapes.context_size / inner_size;
  split.context_rank = outer_rank;
  split.local_heads = shapes.local_heads / inner_size;
  split.local_groups = shapes.local_groups / inner_size;
  return split;
}

AllToAllAttention::AllToAllAttention(const LayerShapes& shapes, Communicator& group, const LayerWorkspace& workspace,
                                     float scale, Communicator* ring)
    : shapes_(shapes), group_(group), workspace_(workspace) {
  const int64_t ring_size = ring ? ring->size() : 1;
  GPT_CHECK_EQ(group.size() * ring_size, shapes.context_size) << "all-to-all attention group";
  GPT_CHECK_EQ(shapes.local_groups % group.size(), 0) << "key/value groups per rank over the all-to-all";
  GPT_CHECK(workspace.context_qkv[3].defined()) << "all-to-all attention without context-parallel scratch";
  if (ring == nullptr) {
    inner_ = std::make_unique<LocalAttention>(scale);
    return;
  }
  // Megatron's levels: context rank = level-0 rank + A x level-1 rank.
  GPT_CHECK(group.rank() == shapes.context_rank % group.size() && ring->rank() == shapes.context_rank / group.size())
      << "a2a+p2p: context rank " << shapes.context_rank << " is not level-0 rank " << group.rank() << " + "
      << group.size() << " x level-1 rank " << ring->rank();
  const std::array<Tensor, 4> blocks = {workspace.context_kv[0], workspace.context_kv[1], workspace.context_kv[2],
                                        workspace.context_kv[3]};
  inner_ = std::make_unique<RingAttention>(head_split_shapes(shapes, group.size(), ring->rank()), *ring, blocks,
                                           scale);
}

Tensor AllToAllAttention::chunk_of(const Tensor& whole, int peer, int half) const {
  const int64_t chunk = shapes_.sequence / 2;
  const int64_t index = half == 0 ? peer : 2 * group_.size() - 1 - peer;
  return whole.slice(index * chunk, (index + 1) * chunk);
}

Tensor AllToAllAttention::gathered_qkv(const Tensor& buffer) const {
  return buffer.view({gathered_rows(), shapes_.batch, shapes_.local_groups / group_.size(),
                      (shapes_.queries_per_group() + 2) * shapes_.head_dim});
}

Tensor AllToAllAttention::gathered_out(const Tensor& buffer) const {
  return buffer.view({gathered_rows(), shapes_.batch, shapes_.local_heads / group_.size(), shapes_.head_dim});
}

ops::DropoutMask AllToAllAttention::head_split(const ops::DropoutMask& dropout) const {
  ops::DropoutMask mask = dropout;
  mask.row_offset += group_.rank() * (shapes_.local_heads / group_.size());  // first global head here
  return mask;
}

void AllToAllAttention::sequence_to_heads(Context& ctx, const Tensor& gathered, const Tensor& local,
                                          const Tensor& staging) const {
  const int size = group_.size(), rank = group_.rank();
  const int64_t columns = gathered.numel() / (gathered_rows() * shapes_.batch);
  const int64_t s = shapes_.sequence, b = shapes_.batch;
  const Tensor whole = gathered.view({gathered_rows(), b, columns});
  std::vector<PeerTransfer> transfers;
  for (int peer = 0; peer < size; ++peer) {
    // Peer p's columns of this rank's rows, packed contiguously: [s, b, columns].
    const Tensor packed = staging.flat_range(peer * s * b * columns, s * b * columns).view({s, b, columns});
    ops::copy_columns(ctx, packed, 0, local.view({s * b, size * columns}), peer * columns, columns, false);
    for (int half = 0; half < 2; ++half) {
      const Tensor piece = packed.slice(half * (s / 2), (half + 1) * (s / 2));
      if (peer == rank) {
        ops::copy(ctx, chunk_of(whole, rank, half), piece);
      } else {
        transfers.push_back({PeerTransfer::Kind::kSend, piece, peer});
        transfers.push_back({PeerTransfer::Kind::kReceive, chunk_of(whole, peer, half), peer});
      }
    }
  }
  group_.exchange(ctx, transfers);
}

void AllToAllAttention::heads_to_sequence(Context& ctx, const Tensor& local, const Tensor& gathered,
                                          const Tensor& staging) const {
  const int size = group_.size(), rank = group_.rank();
  const int64_t columns = gathered.numel() / (gathered_rows() * shapes_.batch);
  const int64_t s = shapes_.sequence, b = shapes_.batch;
  const Tensor whole = gathered.view({gathered_rows(), b, columns});
  std::vector<PeerTransfer> transfers;
  std::vector<Tensor> arrived(static_cast<size_t>(size));
  for (int peer = 0; peer < size; ++peer) {
    arrived[peer] = staging.flat_range(peer * s * b * columns, s * b * columns).view({s, b, columns});
    for (int half = 0; half < 2; ++half) {
      const Tensor piece = arrived[peer].slice(half * (s / 2), (half + 1) * (s / 2));
      if (peer == rank) {
        ops::copy(ctx, piece, chunk_of(whole, rank, half));
      } else {
        transfers.push_back({PeerTransfer::Kind::kSend, chunk_of(whole, peer, half), peer});
        transfers.push_back({PeerTransfer::Kind::kReceive, piece, peer});
      }
    }
  }
  group_.exchange(ctx, transfers);
  for (int peer = 0; peer < size; ++peer) {
    ops::copy_columns(ctx, local.view({s * b, size * columns}), peer * columns, arrived[peer].view({s * b, columns}),
                      0, columns, false);
  }
}

void AllToAllAttention::forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                                const ops::DropoutMask& dropout) const {
  const Tensor staging = workspace_.context_qkv[0];
  const Tensor whole_qkv = gathered_qkv(workspace_.context_qkv[1]);
  const Tensor whole_out = gathered_out(workspace_.context_out[0]);
  sequence_to_heads(ctx, whole_qkv, qkv, staging);
  inner_->forward(ctx, whole_out, lse, whole_qkv, head_split(dropout));
  heads_to_sequence(ctx, out, whole_out, staging);
}

void AllToAllAttention::backward_input(Context& ctx, const Tensor& grad_qkv, const Tensor& grad_out,
                                       const Tensor& qkv, const Tensor& out, const Tensor& lse,
                                       const ops::DropoutMask& dropout) const {
  const Tensor staging = workspace_.context_qkv[0];
  const Tensor whole_qkv = gathered_qkv(workspace_.context_qkv[1]);
  const Tensor whole_grad_qkv = gathered_qkv(workspace_.context_qkv[2]);
  const Tensor whole_out = gathered_out(workspace_.context_out[0]);
  const Tensor whole_grad_out = gathered_out(workspace_.context_out[1]);
  sequence_to_heads(ctx, whole_qkv, qkv, staging);
  sequence_to_heads(ctx, whole_out, out, staging);
  sequence_to_heads(ctx, whole_grad_out, grad_out, staging);
  inner_->backward_input(ctx, whole_grad_qkv, whole_grad_out, whole_qkv, whole_out, lse, head_split(dropout));
  heads_to_sequence(ctx, grad_qkv, whole_grad_qkv, staging);
}

}  // namespace gpt
