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
  int64_t head_dim = 0;          // d
  int64_t local_ffn = 0;         // ffn / tp
  int64_t local_vocab = 0;       // padded vocab / tp
  int64_t vocab_start = 0;       // first vocabulary id of this rank's shard
  int64_t vocab_valid = 0;       // real (unpadded) ids in this rank's shard

  int64_t rows() const { return sequence * batch; }              // full-sequence rows
  int64_t local_rows() const { return local_sequence * batch; }  // residual-stream rows
  int64_t local_projection() const { return local_heads * head_dim; }

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
  Tensor qkv;            // [s b, 3 heads_l d]   QKV gradient
  Tensor ffn;            // [s, b, ffn_l]        MLP gradient

  LayerWorkspace(const LayerShapes& shapes, DType dtype, Arena& arena);
};

}  // namespace gpt
