// Activation shapes of one microbatch on one rank, and the scratch buffers the layers of a model
// chunk share. Scratch is shared because forward and backward of one layer finish before the next
// layer starts; what must survive until backward lives in each layer's per-slot stash instead.
#pragma once

#include <cstdint>

#include "core/arena.h"
#include "model/config.h"
#include "parallel/tensor_parallel/regions.h"

namespace gpt {

struct LayerShapes {
  int64_t sequence = 0;          // s
  int64_t local_sequence = 0;    // s / tp under sequence parallelism, else s
  int64_t sequence_offset = 0;   // first position held by this rank
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

  int64_t rows() const { return sequence * batch; }              // full-sequence rows
  int64_t local_rows() const { return local_sequence * batch; }  // residual-stream rows
  int64_t local_projection() const { return local_heads * head_dim; }
  // linear_qkv's output per rank: each local group's query heads, its key and its value head.
  int64_t local_qkv() const { return (local_heads + 2 * local_groups) * head_dim; }
  int64_t queries_per_group() const { return local_heads / local_groups; }

  static LayerShapes make(const ModelConfig& config, const TensorParallel& tp, int64_t micro_batch);
  // The same from the sizes alone (sequence_parallel: the sequence is split, i.e. SP with TP > 1).
  static LayerShapes make(const ModelConfig& config, int64_t tensor_parallel_size, int64_t tensor_parallel_rank,
                          bool sequence_parallel, int64_t micro_batch);
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

  LayerWorkspace() = default;  // no buffers
  LayerWorkspace(const LayerShapes& shapes, DType dtype, Arena& arena);
  // What the constructor takes from its arena (the same list).
  static int64_t bytes(const LayerShapes& shapes, DType dtype);
};

}  // namespace gpt
