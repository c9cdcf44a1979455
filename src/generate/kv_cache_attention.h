// A KV cache for generation, and the attention core that reads it (model/attention_core.h's seam:
// the layer's interface, forward only). Per layer and sequence the cache keeps the rotated keys and
// the values of every position seen so far, one entry per key/value group (GQA caches only the
// groups, not the query heads that share them).
//
//   keys, values of (layer, sequence): [capacity, groups_l, d] FP32, positions 0 .. length - 1
//
// KvCacheAttention::forward takes the qkv of a sequence's new tokens ([s_new, 1, groups, (q + 2) d],
// queries and keys already rotated at their absolute positions length .. length + s_new - 1),
// appends their keys and values, and attends each new query to every cached position up to its
// own (causal). The cache's length advances when the whole model has run (KvCache::advance).
#pragma once

#include <vector>

#include "model/attention_core.h"
#include "model/config.h"

namespace gpt {

class KvCache {
 public:
  // Under tensor parallelism each rank caches its own groups_l = groups / tensor_parallel.
  KvCache(const ModelConfig& config, int64_t sequences, int64_t capacity, int tensor_parallel = 1);

  int64_t sequences() const { return static_cast<int64_t>(length_.size()); }
  int64_t capacity() const { return capacity_; }
  int64_t length(int64_t sequence) const { return length_[static_cast<size_t>(sequence)]; }
  // After a forward that appended `count` positions of `sequence` to every layer.
  void advance(int64_t sequence, int64_t count);
  void reset(int64_t sequence) { length_[static_cast<size_t>(sequence)] = 0; }

  float* keys(int64_t layer, int64_t sequence) { return data(layer, sequence, 0); }
  float* values(int64_t layer, int64_t sequence) { return data(layer, sequence, 1); }
  int64_t groups() const { return groups_; }
  int64_t head_dim() const { return head_dim_; }
  int64_t bytes() const { return static_cast<int64_t>(storage_.size() * sizeof(float)); }

 private:
  float* data(int64_t layer, int64_t sequence, int which);
  int64_t layers_, groups_, head_dim_, capacity_;
  std::vector<int64_t> length_;
  std::vector<float> storage_;  // [layers, sequences, 2, capacity, groups, d]
};

class KvCacheAttention final : public AttentionCore {
 public:
  KvCacheAttention(KvCache& cache, int64_t layer, float scale) : cache_(cache), layer_(layer), scale_(scale) {}
  // The sequence the next forward belongs to.
  void select(int64_t sequence) { sequence_ = sequence; }

  // out [s_new, 1, heads, d], lse [1, heads, s_new], qkv [s_new, 1, groups, (q + 2) d] FP32 (host).
  void forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv,
               const ops::DropoutMask& dropout) const override;
  // Generation has no backward.
  void backward_input(Context& ctx, const Tensor& grad_qkv, const Tensor& grad_out, const Tensor& qkv,
                      const Tensor& out, const Tensor& lse, const ops::DropoutMask& dropout) const override;

 private:
  KvCache& cache_;
  int64_t layer_;
  float scale_;
  int64_t sequence_ = 0;
};

}  // namespace gpt
