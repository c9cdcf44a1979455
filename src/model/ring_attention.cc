#include "model/ring_attention.h"

#include <utility>

namespace gpt {

RingAttention::RingAttention(const LayerShapes& shapes, Communicator& group, const LayerWorkspace& workspace,
                             float scale)
    : RingAttention(shapes, group,
                    {workspace.context_qkv[0], workspace.context_qkv[1], workspace.context_qkv[2],
                     workspace.context_qkv[3]},
                    scale) {}

RingAttention::RingAttention(const LayerShapes& shapes, Communicator& group, const std::array<Tensor, 4>& scratch,
                             float scale)
    : shapes_(shapes), group_(group), scratch_(scratch), scale_(scale) {
  GPT_CHECK_EQ(group.size(), shapes.context_size) << "ring attention group";
  for (const Tensor& buffer : scratch_) {
    GPT_CHECK(buffer.defined() && buffer.numel() >= shapes.rows() * shapes.local_groups * 2 * shapes.head_dim)
        << "ring attention without context-parallel scratch";
  }
}

Tensor RingAttention::kv_buffer(int index) const {
  const int64_t kv_elements = shapes_.rows() * shapes_.local_groups * 2 * shapes_.head_dim;
  return scratch_[static_cast<size_t>(index)].flat_range(0, kv_elements).view(
      {shapes_.sequence, shapes_.batch, shapes_.local_groups, 2 * shapes_.head_dim});
}

std::vector<ops::AttentionBlock> RingAttention::blocks(int owner) const {
  const int64_t cp = shapes_.context_size, chunk = shapes_.sequence / 2;
  const int64_t query_chunks[2] = {shapes_.context_rank, 2 * cp - 1 - shapes_.context_rank};
  const int64_t key_chunks[2] = {owner, 2 * cp - 1 - owner};
  std::vector<ops::AttentionBlock> result;
  for (int qi = 0; qi < 2; ++qi) {
    for (int ki = 0; ki < 2; ++ki) {
      if (key_chunks[ki] > query_chunks[qi]) continue;  // every key after every query: fully masked
      result.push_back({.query_row = qi * chunk,
                        .query_rows = chunk,
                        .query_position = query_chunks[qi] * chunk,
                        .key_row = ki * chunk,
                        .key_rows = chunk,
                        .key_position = key_chunks[ki] * chunk,
                        .sequence = shapes_.global_sequence});
    }
  }
  return result;
}

CollectiveHandle RingAttention::start_shift(Context& ctx, const Tensor& block, const Tensor& into) const {
  const int size = group_.size(), rank = group_.rank();
  const PeerTransfer transfers[] = {{PeerTransfer::Kind::kSend, block, (rank + 1) % size},
                                    {PeerTransfer::Kind::kReceive, into, (rank + size - 1) % size}};
  return group_.start_exchange(ctx, transfers);
}

void RingAttention::forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                            const ops::DropoutMask& dropout) const {
  const int size = group_.size(), rank = group_.rank();
  const int64_t width = qkv.size(3), kv_width = 2 * shapes_.head_dim;
  Tensor current = kv_buffer(0), next = kv_buffer(1);
  ops::copy_columns(ctx, current, 0, qkv.view({qkv.rows(), width}), width - kv_width, kv_width, false);
  bool started[2] = {false, false};  // per query chunk: out and lse hold a first block
  for (int step = 0; step < size; ++step) {
    CollectiveHandle shift = step + 1 < size ? start_shift(ctx, current, next) : CollectiveHandle();
    const int owner = (rank - step + size) % size;
    for (ops::AttentionBlock block : blocks(owner)) {
      const int query_chunk = block.query_row == 0 ? 0 : 1;
      block.accumulate = started[query_chunk];
      ops::attention_block_forward(ctx, out, lse, qkv, current, scale_, block, dropout);
      started[query_chunk] = true;
    }
    shift.wait(ctx);
    std::swap(current, next);
  }
  GPT_CHECK(started[0] && started[1]) << "ring attention: a query chunk without its diagonal block";
}

void RingAttention::backward_input(Context& ctx, const Tensor& grad_qkv, const Tensor& grad_out, const Tensor& qkv,
                                   const Tensor& out, const Tensor& lse, const ops::DropoutMask& dropout) const {
  const int size = group_.size(), rank = group_.rank();
  const int64_t width = qkv.size(3), kv_width = 2 * shapes_.head_dim;
  Tensor current = kv_buffer(0), next = kv_buffer(1), grad_current = kv_buffer(2), grad_next = kv_buffer(3);
  ops::copy_columns(ctx, current, 0, qkv.view({qkv.rows(), width}), width - kv_width, kv_width, false);
  ops::zero(ctx, grad_qkv);
  ops::zero(ctx, grad_current);
  for (int step = 0; step < size; ++step) {
    // The block moves on while its gradient is formed here; the gradient follows it afterwards.
    CollectiveHandle shift = step + 1 < size ? start_shift(ctx, current, next) : CollectiveHandle();
    const int owner = (rank - step + size) % size;
    for (const ops::AttentionBlock& block : blocks(owner)) {
      ops::attention_block_backward(ctx, grad_qkv, grad_current, grad_out, qkv, current, out, lse, scale_, block,
                                    dropout);
    }
    shift.wait(ctx);
    // After the last step the gradient goes one more hop: to the block's owner (this rank's own
    // block's gradient arrives from the previous rank). A ring of one (a2a+p2p's level 1 of size 1)
    // keeps its own.
    if (size > 1) {
      start_shift(ctx, grad_current, grad_next).wait(ctx);
      std::swap(grad_current, grad_next);
    }
    std::swap(current, next);
  }
  ops::copy_columns(ctx, grad_qkv.view({grad_qkv.rows(), width}), width - kv_width, grad_current, 0, kv_width, true);
}

}  // namespace gpt
