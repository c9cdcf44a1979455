// The decoder for generation: the same modules' arithmetic as training (the op set's norms, GEMMs,
// activations; model/transformer_layer.h's order), FP32 on the host, without stashes, dropout or
// backward, over a ragged batch: each segment is some new tokens of one sequence, all segments'
// rows going through the linears together and each segment through the attention core alone.
//
//   forward_cached: every segment's tokens appended to its sequence's KV cache at positions
//     length .. length + s - 1 (RoPE angles and learned positions continue there); the attention
//     core is KvCacheAttention. Prefill is one call with whole prompts, decoding one call per step
//     with one token per live sequence.
//   forward_full: one whole sequence from position 0 through the training path's attention core
//     (LocalAttention, the op set's causal attention) and RoPE op, no cache: the reference the
//     cached path is tested against.
#pragma once

#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "core/context.h"
#include "generate/kv_cache_attention.h"
#include "model/config.h"

namespace gpt {

class InferenceModel {
 public:
  // `params`: global name -> FP32 values (generate/checkpoint_model.h); kept by reference.
  // `sequences` KV caches of `capacity` positions each.
  InferenceModel(const ModelConfig& config, const std::map<std::string, std::vector<float>>& params, Context& ctx,
                 int64_t sequences, int64_t capacity);

  struct Segment {
    int64_t sequence = 0;
    std::span<const int32_t> tokens;
  };
  // Logits [segments, padded_vocab] of each segment's last token.
  void forward_cached(std::span<const Segment> segments, std::vector<float>& logits);
  // Logits [padded_vocab] of the last token of `tokens` (positions 0 .. s - 1), no cache.
  void forward_full(std::span<const int32_t> tokens, std::vector<float>& logits);

  KvCache& cache() { return cache_; }
  const ModelConfig& config() const { return config_; }

 private:
  struct Row {
    int32_t token;
    int64_t position;
  };
  void run(std::span<const Segment> segments, bool cached, std::vector<float>& logits);
  const float* param(const std::string& name) const;
  Tensor host(std::vector<float>& buffer, Shape shape);
  Tensor weight(const std::string& name, Shape shape) const;
  Tensor bias(const std::string& name, int64_t size) const;  // undefined without biases

  ModelConfig config_;
  const std::map<std::string, std::vector<float>>& params_;
  Context& ctx_;
  KvCache cache_;
  std::vector<std::unique_ptr<KvCacheAttention>> cached_cores_;  // per layer
  std::unique_ptr<AttentionCore> full_core_;                      // LocalAttention
  // Scratch, grown to the largest batch seen.
  std::vector<float> x_, ln_, mean_, rstd_, qkv_, attention_, proj_, residual_, fc1_, act_, mlp_, lse_, last_;
};

// Rotates the query and key heads of one token's packed qkv row [groups, (q + 2) d] by RoPE at
// `position` (the op set's rope_forward arithmetic for an absolute position).
void rope_at_position(float* qkv_row, int64_t groups, int64_t queries_per_group, int64_t head_dim,
                      int64_t rotary_dim, float base, int64_t position, bool interleaved);

}  // namespace gpt
