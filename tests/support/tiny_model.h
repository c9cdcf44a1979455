// The tiny model the model unit tests build: hidden 16, 4 heads of 4, ffn 24, vocabulary 37
// padded to a multiple of 8 x `pad_tp`; and its Llama-style variant (RoPE, RMSNorm, SwiGLU, GQA,
// no biases, untied head).
#pragma once

#include <cstdint>

#include "model/config.h"

namespace gpt::testing_support {

inline ModelConfig tiny_model(int64_t layers, int64_t sequence = 6, int64_t pad_tp = 1) {
  ModelConfig c;
  c.num_layers = layers;
  c.hidden_size = 16;
  c.ffn_hidden_size = 24;
  c.num_attention_heads = 4;
  c.kv_channels = 4;
  c.seq_length = sequence;
  c.max_position_embeddings = 8;
  c.vocab_size = 37;
  c.padded_vocab_size = padded_vocab_size(37, 8, pad_tp);
  return c;
}

inline ModelConfig llama_style(ModelConfig c, int64_t query_groups = 2) {
  c.num_query_groups = query_groups;
  c.position_embedding = PositionEmbedding::kRope;
  c.rotary_dim = c.kv_channels;
  c.normalization = Normalization::kRMSNorm;
  c.swiglu = true;
  c.add_bias_linear = false;
  c.untie_embeddings_and_output_weights = true;
  return c;
}

}  // namespace gpt::testing_support
