// The GPT architecture's hyperparameters, resolved from the arguments (defaults filled in, vocab
// padded).
#pragma once

#include <cstdint>

#include "core/dtype.h"
#include "kernels/rope_frequencies.h"
#include "model/fp8_scaling.h"
#include "model/moe_config.h"

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

// Megatron's --position-embedding-type (none also for --no-position-embedding).
enum class PositionEmbedding { kLearnedAbsolute, kRope, kNone };
// Megatron's --normalization.
enum class Normalization { kLayerNorm, kRMSNorm };

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
  Fp8Config fp8;                    // FP8 GEMMs of the transformer layers' linears (off by default)

  // Llama-style options (Megatron's flags in parentheses).
  int64_t num_query_groups = 0;     // key/value heads (--num-query-groups); 0: one per head (no GQA)
  PositionEmbedding position_embedding = PositionEmbedding::kLearnedAbsolute;
  int64_t rotary_dim = 0;           // rope: rotated dims per head, kv_channels x --rotary-percent
  float rotary_base = 10000.0f;     // rope: --rotary-base
  bool rotary_interleaved = false;  // rope: pairs (2j, 2j + 1) instead of (j, j + rotary_dim / 2)
  // rope: Llama 3.1's frequency scaling (--use-rope-scaling, --rope-scaling-factor).
  RopeScaling rope_scaling;
  Normalization normalization = Normalization::kLayerNorm;
  // --apply-layernorm-1p: every norm (LayerNorm or RMSNorm) scales by 1 + weight, its weight stored
  // and initialised zero-centred (Megatron's layernorm_zero_centered_gamma).
  bool layernorm_zero_centered_gamma = false;
  // --qk-layernorm: after the QKV projection and before RoPE, every query head and every key head
  // ([s, b, heads, d] and [s, b, groups, d]) normalized over its d dims by the model's norm (same
  // epsilon, zero-centred with --apply-layernorm-1p), one weight (and LayerNorm bias) of d for the
  // queries and one for the keys per layer, shared by all heads (Megatron's q_layernorm / k_layernorm).
  bool qk_layernorm = false;
  // --apply-wd-to-qk-layernorm: those norms' weights and biases take weight decay (Megatron's rule:
  // 1-D parameters and biases decay only when their name holds "q_layernorm." or "k_layernorm.").
  bool apply_wd_to_qk_layernorm = false;
  bool swiglu = false;              // gated SiLU MLP: fc1 [2 ffn, h] = [gate; up]
  bool add_bias_linear = true;      // false: --disable-bias-linear
  // --add-qkv-bias: linear_qkv has a bias even without the other linears' (Qwen2's q/k/v biases;
  // Megatron's add_qkv_bias, which its argument parsing also sets whenever add_bias_linear is).
  bool add_qkv_bias = false;
  // Without swiglu: the exact erf GeLU (Megatron's F.gelu when its bias-GeLU fusion is off, i.e.
  // with --disable-bias-linear or --no-bias-gelu-fusion) instead of the fused tanh approximation.
  bool exact_gelu = false;
  // --squared-relu: act = relu(x)^2 (Megatron's squared_relu; biases, if any, added before it).
  bool squared_relu = false;
  // Dropout (kernels/dropout_mask.h: masks keyed by seed, iteration, sample, layer and element).
  float hidden_dropout = 0.0f;
  float attention_dropout = 0.0f;
  uint64_t seed = 0;
  MoeConfig moe;                    // mixture-of-experts layers (none by default)

  int64_t attention_projection_size() const { return num_attention_heads * kv_channels; }
  int64_t query_groups() const { return num_query_groups > 0 ? num_query_groups : num_attention_heads; }
  int64_t queries_per_group() const { return num_attention_heads / query_groups(); }
  // linear_qkv's output: per group its query heads, one key and one value head (Megatron's packing).
  int64_t qkv_size() const { return (num_attention_heads + 2 * query_groups()) * kv_channels; }
  // linear_fc1's output: [gate; up] with SwiGLU.
  int64_t fc1_size() const { return swiglu ? 2 * ffn_hidden_size : ffn_hidden_size; }
  bool has_qkv_bias() const { return add_bias_linear || add_qkv_bias; }
  RopeFrequencies rope_frequencies() const { return RopeFrequencies(rotary_base, rope_scaling); }
  bool has_layernorm_bias() const { return normalization == Normalization::kLayerNorm; }
  bool has_dropout() const { return hidden_dropout > 0.0f || attention_dropout > 0.0f; }
};

// Megatron's _vocab_size_with_padding: the smallest multiple of divisible_by * tp >= vocab_size.
int64_t padded_vocab_size(int64_t vocab_size, int64_t divisible_by, int64_t tensor_parallel_size);

}  // namespace gpt
