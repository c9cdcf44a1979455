#include "train/report/flops.h"

namespace gpt {

double model_flops_per_iteration(const ModelConfig& c, int64_t global_batch_size) {
  const double h = static_cast<double>(c.hidden_size);
  const double s = static_cast<double>(c.seq_length);
  const double layers = static_cast<double>(c.num_layers);
  const double query_ratio = static_cast<double>(c.attention_projection_size()) / h;
  // Keys and values are projected per query group (grouped-query attention), queries per head.
  const double group_ratio = static_cast<double>(c.query_groups()) / static_cast<double>(c.num_attention_heads);
  const double attention = (1.0 + group_ratio + s / h) * query_ratio;
  // SwiGLU's fc1 is twice as wide: 3 ffn-by-h matrices instead of 2 (Megatron's gated multiplier 3/2).
  // An MoE layer's MLP is its k active experts' and its shared expert's (the router's GEMM,
  // routing, permutation and combine are not counted, as in Megatron): the layers' mean width.
  const double moe_layers = static_cast<double>(c.moe.moe_layer_count());
  const double active_ffn = static_cast<double>(c.moe.ffn_hidden_size * c.moe.topk + c.moe.shared_expert_size);
  const double ffn =
      moe_layers == 0.0 ? static_cast<double>(c.ffn_hidden_size)
                        : (static_cast<double>(c.ffn_hidden_size) * (layers - moe_layers) + active_ffn * moe_layers) / layers;
  const double mlp = ffn / h * (c.swiglu ? 1.5 : 1.0);
  const double logits = static_cast<double>(c.padded_vocab_size) / (2.0 * layers * h);
  return 12.0 * static_cast<double>(global_batch_size) * s * layers * h * h * (attention + mlp + logits);
}

}  // namespace gpt
