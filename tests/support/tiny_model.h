// The tiny model the model unit tests build: hidden 16, 4 heads of 4, ffn 24, vocabulary 37
// padded to a multiple of 8 x `pad_tp`; and its Llama-style variant (RoPE, RMSNorm, SwiGLU, GQA,
// no biases, untied head).
#pragma once

#include <cstdint>

#include <vector>

#include "model/gpt_model.h"

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

// Token ids and targets of microbatch `slot` (a fixed pattern of it) into the first and the last
// chunk.
inline void load_pattern(Context& ctx, GptModel& first, GptModel& last, int slot, const ModelConfig& c,
                         int64_t batch) {
  std::vector<int32_t> tokens(static_cast<size_t>(batch * c.seq_length)), targets(tokens.size());
  for (size_t i = 0; i < tokens.size(); ++i) {
    tokens[i] = static_cast<int32_t>((i * 7 + 3 + 11 * slot) % c.vocab_size);
    targets[i] = static_cast<int32_t>((i * 5 + 1 + 3 * slot) % c.vocab_size);
  }
  first.load_tokens(ctx, slot, tokens);
  last.load_targets(ctx, slot, targets);
}

}  // namespace gpt::testing_support
