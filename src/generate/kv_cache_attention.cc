#include "generate/kv_cache_attention.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>

namespace gpt {

KvCache::KvCache(const ModelConfig& config, int64_t sequences, int64_t capacity, int tensor_parallel)
    : layers_(config.num_layers),
      groups_(config.query_groups() / tensor_parallel),
      head_dim_(config.kv_channels),
      capacity_(capacity),
      length_(static_cast<size_t>(sequences), 0),
      storage_(static_cast<size_t>(layers_ * sequences * 2 * capacity * groups_ * head_dim_), 0.0f) {}

float* KvCache::data(int64_t layer, int64_t sequence, int which) {
  GPT_CHECK(layer >= 0 && layer < layers_ && sequence >= 0 && sequence < sequences()) << "KV cache entry";
  const int64_t block = capacity_ * groups_ * head_dim_;
  return storage_.data() + ((layer * sequences() + sequence) * 2 + which) * block;
}

void KvCache::advance(int64_t sequence, int64_t count) {
  int64_t& length = length_[static_cast<size_t>(sequence)];
  GPT_CHECK_LE(length + count, capacity_) << "KV cache of sequence " << sequence << " overflows";
  length += count;
}

void KvCacheAttention::forward(Context& ctx, const Tensor& out, const Tensor& lse, const Tensor& qkv,
                               const ops::DropoutMask& dropout) const {
  GPT_CHECK(!dropout.enabled()) << "generation runs without dropout";
  GPT_CHECK(ctx.device() == Device::kCpu && qkv.dtype() == DType::kFloat32) << "the KV cache is FP32 on the host";
  GPT_CHECK(qkv.rank() == 4 && out.rank() == 4 && qkv.size(1) == 1) << "one sequence at a time: " << qkv.to_string();
  const int64_t s = qkv.size(0), groups = qkv.size(2), heads = out.size(2), d = out.size(3);
  GPT_CHECK(groups == cache_.groups() && d == cache_.head_dim() && heads % groups == 0) << "KV cache shapes";
  const int64_t q = heads / groups, width = (q + 2) * d;
  GPT_CHECK_EQ(qkv.size(3), width);
  const int64_t start = cache_.length(sequence_), total = start + s;
  GPT_CHECK_LE(total, cache_.capacity()) << "KV cache of sequence " << sequence_ << " overflows";
  float* keys = cache_.keys(layer_, sequence_);
  float* values = cache_.values(layer_, sequence_);
  const float* in = qkv.data_as<float>();
  // Append the new keys and values: [position, group, d].
  for (int64_t t = 0; t < s; ++t) {
    for (int64_t g = 0; g < groups; ++g) {
      const float* row = in + (t * groups + g) * width;
      std::copy(row + q * d, row + (q + 1) * d, keys + ((start + t) * groups + g) * d);
      std::copy(row + (q + 1) * d, row + (q + 2) * d, values + ((start + t) * groups + g) * d);
    }
  }
  float* scores = ctx.cpu_scratch(0, static_cast<size_t>(total));
  float* result = out.data_as<float>();
  float* lse_out = lse.defined() ? lse.data_as<float>() : nullptr;
  for (int64_t t = 0; t < s; ++t) {
    const int64_t visible = start + t + 1;  // causal: positions 0 .. start + t
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t member = 0; member < q; ++member) {
        const int64_t head = g * q + member;
        const float* query = in + (t * groups + g) * width + member * d;
        // scores_j = scale * q . k_j over the group's cached keys (stride groups * d).
        cblas_sgemv(CblasRowMajor, CblasNoTrans, static_cast<int>(visible), static_cast<int>(d), scale_,
                    keys + g * d, static_cast<int>(groups * d), query, 1, 0.0f, scores, 1);
        float row_max = -std::numeric_limits<float>::infinity();
        for (int64_t j = 0; j < visible; ++j) row_max = std::max(row_max, scores[j]);
        double total_weight = 0.0;
        for (int64_t j = 0; j < visible; ++j) {
          scores[j] = std::exp(scores[j] - row_max);
          total_weight += scores[j];
        }
        const float inverse = static_cast<float>(1.0 / total_weight);
        for (int64_t j = 0; j < visible; ++j) scores[j] *= inverse;
        float* o = result + (t * heads + head) * d;
        // o = P v over the group's cached values.
        cblas_sgemv(CblasRowMajor, CblasTrans, static_cast<int>(visible), static_cast<int>(d), 1.0f, values + g * d,
                    static_cast<int>(groups * d), scores, 1, 0.0f, o, 1);
        if (lse_out) lse_out[head * s + t] = row_max + static_cast<float>(std::log(total_weight));
      }
    }
  }
}

void KvCacheAttention::backward_input(Context&, const Tensor&, const Tensor&, const Tensor&, const Tensor&,
                                      const Tensor&, const ops::DropoutMask&) const {
  GPT_CHECK(false) << "KvCacheAttention is forward only (generation)";
}

}  // namespace gpt
