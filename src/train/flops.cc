#include "train/flops.h"

namespace gpt {

double model_flops_per_iteration(const ModelConfig& c, int64_t global_batch_size) {
  const double h = static_cast<double>(c.hidden_size);
  const double s = static_cast<double>(c.seq_length);
  const double layers = static_cast<double>(c.num_layers);
  const double query_ratio = static_cast<double>(c.attention_projection_size()) / h;
  const double attention = (1.0 + 1.0 + s / h) * query_ratio;  // query groups == heads (no GQA)
  const double mlp = static_cast<double>(c.ffn_hidden_size) / h;
  const double logits = static_cast<double>(c.padded_vocab_size) / (2.0 * layers * h);
  return 12.0 * static_cast<double>(global_batch_size) * s * layers * h * h * (attention + mlp + logits);
}

}  // namespace gpt
