#include "model/layer_shapes.h"

namespace gpt {

LayerShapes LayerShapes::make(const ModelConfig& c, const TensorParallel& tp, int64_t micro_batch) {
  LayerShapes s;
  s.sequence = c.seq_length;
  s.local_sequence = tp.local_sequence(c.seq_length);
  s.sequence_offset = tp.sequence_offset(c.seq_length);
  s.batch = micro_batch;
  s.hidden = c.hidden_size;
  s.local_heads = c.num_attention_heads / tp.size();
  s.head_dim = c.kv_channels;
  s.local_ffn = c.ffn_hidden_size / tp.size();
  s.local_vocab = c.padded_vocab_size / tp.size();
  s.vocab_start = tp.rank() * s.local_vocab;
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
  qkv = arena.allocate(dtype, {s.rows(), 3 * s.local_projection()});
  ffn = arena.allocate(dtype, {s.sequence, s.batch, s.local_ffn});
}

}  // namespace gpt
