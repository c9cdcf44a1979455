// The GPT architecture's hyperparameters, resolved from the arguments (defaults filled in, vocab
// padded).
#pragma once

#include <cstdint>

#include "core/dtype.h"

namespace gpt {

// Activation recompute, Megatron's --recompute-granularity / --recompute-method /
// --recompute-num-layers (megatron/core/transformer/transformer_config.py). Which layers it
// touches is decided per model chunk by plan_recompute (model/recompute_plan.h).
enum class RecomputeGranularity {
  kNone,
  kFull,       // a recomputed layer keeps only its group's input; backward re-runs the group's forward
  kSelective,  // every layer drops its attention output and lse; backward re-runs attention from qkv
};
enum class RecomputeMethod {
  kNone,     // selective, or no recompute
  kUniform,  // the chunk's layers in consecutive groups of num_layers, each recomputed from its input
  kBlock,    // only the first num_layers layers of each chunk, each recomputed from its own input
};
struct RecomputeConfig {
  RecomputeGranularity granularity = RecomputeGranularity::kNone;
  RecomputeMethod method = RecomputeMethod::kNone;  // full only
  int64_t num_layers = 0;                           // full only: group size (uniform) or layers (block)
};

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
  RecomputeConfig recompute;

  int64_t attention_projection_size() const { return num_attention_heads * kv_channels; }
};

// Megatron's _vocab_size_with_padding: the smallest multiple of divisible_by * tp >= vocab_size.
int64_t padded_vocab_size(int64_t vocab_size, int64_t divisible_by, int64_t tensor_parallel_size);

}  // namespace gpt
