// The GPT architecture's hyperparameters, resolved from the arguments (defaults filled in, vocab
// padded).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace gpt {

struct ModelConfig {
  int64_t num_layers = 0;
  int64_t hidden_size = 0;
  int64_t ffn_hidden_size = 0;      // 4h unless --ffn-hidden-size
  int64_t num_attention_heads = 0;
  int64_t kv_channels = 0;          // head dim d; h / heads unless --kv-channels
  int64_t seq_length = 0;
  int64_t max_position_embeddings = 0;
  int64_t vocab_size = 0;           // real tokens
  int64_t padded_vocab_size = 0;    // multiple of --make-vocab-size-divisible-by x TP
  bool untie_embeddings_and_output_weights = false;
  float layernorm_epsilon = 1e-5f;
  float init_method_std = 0.02f;
  DType dtype = DType::kFloat32;    // parameters and activations (bfloat16 with --bf16)

  int64_t attention_projection_size() const { return num_attention_heads * kv_channels; }
};

// Megatron's _vocab_size_with_padding: the smallest multiple of divisible_by * tp >= vocab_size.
int64_t padded_vocab_size(int64_t vocab_size, int64_t divisible_by, int64_t tensor_parallel_size);

}  // namespace gpt
