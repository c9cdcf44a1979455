#include "model/layer_shapes.h"

namespace gpt {

LayerShapes LayerShapes::make(const ModelConfig& c, const TensorParallel& tp, int64_t micro_batch) {
  return make(c, tp.size(), tp.rank(), tp.sequence_parallel(), micro_batch);
}

LayerShapes LayerShapes::make(const ModelConfig& c, int64_t tp_size, int64_t tp_rank, bool sequence_parallel,
                              int64_t micro_batch) {
  LayerShapes s;
  s.sequence = c.seq_length;
  s.local_sequence = sequence_parallel ? c.seq_length / tp_size : c.seq_length;
  s.sequence_offset = sequence_parallel ? tp_rank * s.local_sequence : 0;
  s.batch = micro_batch;
  s.hidden = c.hidden_size;
  s.local_heads = c.num_attention_heads / tp_size;
  s.head_offset = tp_rank * s.local_heads;
  s.local_groups = c.query_groups() / tp_size;
  s.head_dim = c.kv_channels;
  s.local_ffn = c.ffn_hidden_size / tp_size;
  s.local_fc1 = c.fc1_size() / tp_size;
  s.local_vocab = c.padded_vocab_size / tp_size;
  s.vocab_start = tp_rank * s.local_vocab;
  const int64_t valid = c.vocab_size - s.vocab_start;
  s.vocab_valid = valid < 0 ? 0 : (valid > s.local_vocab ? s.local_vocab : valid);
  return s;
}

LayerWorkspace::LayerWorkspace(const LayerShapes& s, DType dtype, Arena& arena) {
  full_a = arena.allocate(dtype, {s.sequence, s.batch, s.hidden});
  full_b = arena.allocate(dtype, {s.sequence, s.batch, s.hidden});
  local_a = arena.allocate(dtype, {s.local_sequence, s.batch, s.hidden});
  local_b = arena.allocate(dtype, {s.local_sequence, s.batch, s.hidden});
  projection = arena.allocate(dtype, {s.rows(), s.local_projection()});
  qkv = arena.allocate(dtype, {s.rows(), s.local_qkv()});
  ffn = arena.allocate(dtype, {s.sequence, s.batch, s.local_ffn});
  fc1 = s.local_fc1 == s.local_ffn ? ffn : arena.allocate(dtype, {s.sequence, s.batch, s.local_fc1});
}

}  // namespace gpt
