// Activation shapes of one microbatch on one rank, and the scratch buffers the layers of a model
// chunk share. Scratch is shared because forward and backward of one layer finish before the next
// layer starts; what must survive until backward lives in each layer's per-slot stash instead.
#pragma once

#include <cstdint>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "model/config.h"
#include "parallel/tensor_parallel/regions.h"

namespace gpt {

// Rows of a rank's activations whose global sequence positions are consecutive: local rows
// [local_row, local_row + rows) hold positions [position, position + rows).
struct SequenceSegment {
  int64_t local_row = 0;
  int64_t rows = 0;
  int64_t position = 0;
};

// Context parallelism's load-balanced causal split: the sequence of S tokens is cut into 2 CP
// chunks of S / (2 CP) and CP rank r holds chunks r and 2 CP - 1 - r, in that order, as its local
// sequence of S / CP rows (each rank then has the same share of the causal mask's work). The
// segments of its local rows [first, first + count); one segment when CP = 1.
std::vector<SequenceSegment> context_segments(int64_t global_sequence, int64_t context_size, int64_t context_rank,
                                              int64_t first, int64_t count);

struct LayerShapes {
  int64_t sequence = 0;          // s: this context-parallel rank's rows of the sequence (S / CP)
  int64_t local_sequence = 0;    // s / tp under sequence parallelism, else s
  int64_t sequence_offset = 0;   // first of the s rows held by this rank (SP), 0 without SP
  int64_t global_sequence = 0;   // S, the whole sequence
  int64_t context_size = 1;      // CP
  int64_t context_rank = 0;
  int64_t context_inner = 0;     // a2a+p2p's level-0 (all-to-all) size when a layer uses it, else 0
  int64_t batch = 0;             // b (micro batch)
  int64_t hidden = 0;            // h
  int64_t local_heads = 0;       // heads / tp
  int64_t head_offset = 0;       // first global head of this rank
  int64_t local_groups = 0;      // query groups / tp (= local_heads without GQA)
  int64_t head_dim = 0;          // d
  int64_t local_ffn = 0;         // ffn / tp
  int64_t local_fc1 = 0;         // fc1's output per rank: 2 local_ffn with SwiGLU, else local_ffn
  int64_t local_vocab = 0;       // padded vocab / tp
  int64_t vocab_start = 0;       // first vocabulary id of this rank's shard
  int64_t vocab_valid = 0;       // real (unpadded) ids in this rank's shard
  bool qk_layernorm = false;     // queries and keys normalized per head (their inputs stashed)
  // Mixture of experts (model/moe_block.h; all 0 in a dense model). The chunk's shapes describe
  // its dense layers; for_layer gives an MoE layer's, whose local_ffn / local_fc1 are its shared
  // expert's (0 without one).
  int64_t experts = 0;           // E
  int64_t moe_topk = 0;          // k
  int64_t moe_rows = 0;          // M: rows of the expert-major buffer (s b k dropless; padded: E x capacity)
  int64_t moe_local_ffn = 0;     // each expert's ffn / etp (the expert tensor-parallel size, TP by default)
  int64_t moe_local_fc1 = 0;     // each expert's fc1 output per rank (2 moe_local_ffn with SwiGLU)
  int64_t local_experts = 0;     // E / EP: the experts this rank holds
  // Under expert parallelism (MoeConfig::exchanges_tokens): N, the rows the dispatcher's group
  // (ETP x EP ranks) holds together, each rank's residual-stream rows gathered; 0 otherwise.
  int64_t moe_exchange_rows = 0;
  // ... with the alltoall dispatcher: the rows this rank sends at most (each of its rows' k pairs
  // to the ETP slices of the pair's expert: s_l b k ETP), and the returned rows per own row (k ETP).
  bool moe_alltoall = false;
  int64_t moe_send_rows = 0;
  int64_t moe_return_width = 0;
  int64_t shared_local_ffn = 0;  // the shared expert's ffn / tp (0: none)
  int64_t shared_local_fc1 = 0;
  bool moe_layer = false;        // these are an MoE layer's shapes
  bool shared_expert = false;    // the MoE layers have a shared expert
  // Whether the layer has a dense MLP (a dense layer, or an MoE layer's shared expert).
  bool dense_mlp() const { return !moe_layer || shared_expert; }

  int64_t rows() const { return sequence * batch; }              // full-sequence rows (of this CP rank)
  int64_t local_rows() const { return local_sequence * batch; }  // residual-stream rows
  int64_t local_projection() const { return local_heads * head_dim; }
  // linear_qkv's output per rank: each local group's query heads, its key and its value head.
  int64_t local_qkv() const { return (local_heads + 2 * local_groups) * head_dim; }
  int64_t queries_per_group() const { return local_heads / local_groups; }
  // --qk-layernorm's rows of d: every query head and every key head of this rank's rows.
  int64_t query_head_rows() const { return rows() * local_heads; }
  int64_t key_head_rows() const { return rows() * local_groups; }

  // The shapes of global layer `layer` of `config`: these, or an MoE layer's.
  LayerShapes for_layer(const ModelConfig& config, int64_t layer) const;
  // The expert-major buffer's rows for these shapes and `config` (moe_rows).
  static int64_t expert_rows(const ModelConfig& config, int64_t rows, int64_t capacity_segments);

  // Global positions of this rank's rows [first, first + count) of its s (context_segments).
  std::vector<SequenceSegment> segments(int64_t first, int64_t count) const {
    return context_segments(global_sequence, context_size, context_rank, first, count);
  }
  // Those of the residual stream's rows [sequence_offset, sequence_offset + local_sequence),
  // local_row counted from sequence_offset.
  std::vector<SequenceSegment> residual_segments() const;

  static LayerShapes make(const ModelConfig& config, const TensorParallel& tp, int64_t micro_batch,
                          int64_t context_size = 1, int64_t context_rank = 0);
  // The same from the sizes alone (sequence_parallel: the sequence is split, i.e. SP with TP > 1).
  static LayerShapes make(const ModelConfig& config, int64_t tensor_parallel_size, int64_t tensor_parallel_rank,
                          bool sequence_parallel, int64_t micro_batch, int64_t context_size = 1,
                          int64_t context_rank = 0);
};

// Scratch shared by all layers of a chunk (allocated once).
struct LayerWorkspace {
  Tensor full_a;         // [s, b, h]    gathered activations / row-parallel partial sums
  Tensor full_b;         // [s, b, h]
  Tensor local_a;        // [s_l, b, h]  reduced results in the residual stream
  Tensor local_b;        // [s_l, b, h]
  Tensor projection;     // [s b, heads_l d]     attention-output gradient
  Tensor qkv;            // [s b, qkv_l]         QKV gradient
  Tensor ffn;            // [s, b, ffn_l]        MLP gradient
  Tensor fc1;            // [s, b, 2 ffn_l]      fc1's output gradient with SwiGLU (else a view of ffn)
  // Context parallelism's attention scratch (CP > 1 only): the ring's K/V blocks and their
  // gradients in flight, the all-to-all's staging and its head-split qkv, output and gradients.
  Tensor context_qkv[4];  // [s b, qkv_l] each
  Tensor context_out[2];  // [s b, heads_l d] each
  // a2a+p2p (context_inner > 0) only: the level-1 ring's K/V blocks and their gradients in flight,
  // beside the all-to-all's buffers above.
  Tensor context_kv[4];   // [s b, groups_l 2d] each
  // MoE layers (experts > 0 only): the expert-major rows (the permuted input, then the gradients
  // of the experts' outputs and inputs), the experts' activation and fc1-output gradients, the
  // router's logit and combine-weight gradients (float32) and its logit gradient in the model's
  // dtype (for the router's GEMMs).
  Tensor moe_rows_a;      // [M, h]
  Tensor moe_rows_b;      // [M, h]
  Tensor moe_ffn;         // [M, ffn_e_l]
  Tensor moe_fc1;         // [M, fc1_e_l] (a view of moe_ffn without SwiGLU)
  Tensor moe_dlogits;     // [s b, E] float32
  Tensor moe_dlogits_t;   // [s b, E] the model's dtype
  Tensor moe_dweights;    // [s b, k] float32
  Tensor moe_lse;         // [s b] float32  the z-loss's logsumexp
  Tensor moe_coefficients;  // [b, E] float32  the load-balancing losses' gradient factors
  Tensor moe_grad_input;  // [s_l, b, h]  the shared expert's input gradient, until the routed one's is done
  // Under expert parallelism (moe_exchange_rows N > 0): the group's rows (gathered input, output
  // gradient) and partial sums (output, input gradient), and the routing of this rank's rows and of
  // the group's (each pair's expert, -1 when dropped, and its weight's bits: [rows, 2 k] int32).
  Tensor moe_exchange_a;  // [N, h]  (allgather)
  Tensor moe_exchange_b;  // [N, h]  (allgather)
  Tensor moe_send_a;      // [S, h]  (alltoall: rows sent and returned)
  Tensor moe_send_b;      // [S, h]
  Tensor moe_received_a;  // [M, h]  (alltoall: rows received, and their results before return)
  Tensor moe_received_b;  // [M, h]
  Tensor moe_received_dweights;  // [M, 1] float32  (alltoall: each received row's weight gradient)
  Tensor moe_returned_dweights;  // [S, 1] float32
  Tensor moe_route_own;   // [s_l b, 2 k] int32
  Tensor moe_route_all;   // [N, 2 k] int32
  Tensor moe_exchange_dweights;  // [N, k] float32  the combine weights' gradients (partial sums; allgather)
  Tensor moe_own_dweights;       // [s_l b, k] float32  those of this rank's rows (TP > 1)
  Tensor shared_ffn;      // [s, b, shared_ffn_l]  the shared expert's (as ffn / fc1 for the dense MLP)
  Tensor shared_fc1;      // [s, b, shared_fc1_l]  (a view of shared_ffn without SwiGLU)

  LayerWorkspace() = default;  // no buffers
  LayerWorkspace(const LayerShapes& shapes, DType dtype, Arena& arena);
  // What the constructor takes from its arena (the same list), in the arithmetic of `shapes`
  // (LayerShapes or CheckedLayerShapes, model/checked_layer_shapes.h).
  template <typename Sizes>
  static decltype(std::declval<const Sizes&>().rows()) bytes(const Sizes& shapes, DType dtype);
};

}  // namespace gpt
