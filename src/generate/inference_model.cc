#include "generate/inference_model.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "model/param_registry.h"

namespace gpt {

void rope_at_position(float* qkv_row, int64_t groups, int64_t queries_per_group, int64_t head_dim,
                      int64_t rotary_dim, float base, int64_t position, bool interleaved) {
  const int64_t half = rotary_dim / 2, width = (queries_per_group + 2) * head_dim;
  const int64_t pair_step = interleaved ? 2 : 1, second = interleaved ? 1 : half;  // as kernels/cpu/rope.cc
  for (int64_t j = 0; j < half; ++j) {
    // As kernels/cpu/rope.cc: inv_freq and the angle in FP32, cosine and sine in double.
    const float inv_freq = 1.0f / std::pow(base, static_cast<float>(2 * j) / static_cast<float>(rotary_dim));
    const float angle = static_cast<float>(position) * inv_freq;
    const float c = static_cast<float>(std::cos(static_cast<double>(angle)));
    const float s = static_cast<float>(std::sin(static_cast<double>(angle)));
    for (int64_t g = 0; g < groups; ++g) {
      for (int64_t head = 0; head <= queries_per_group; ++head) {  // the queries and the key
        float* x = qkv_row + g * width + head * head_dim;
        const int64_t i1 = j * pair_step, i2 = second + j * pair_step;
        const float x1 = x[i1], x2 = x[i2];
        x[i1] = x1 * c - x2 * s;
        x[i2] = x2 * c + x1 * s;
      }
    }
  }
}

InferenceModel::InferenceModel(const ModelConfig& config, const std::map<std::string, std::vector<float>>& params,
                               Context& ctx, int64_t sequences, int64_t capacity)
    : config_(config), params_(params), ctx_(ctx), cache_(config, sequences, capacity) {
  GPT_CHECK(ctx.device() == Device::kCpu) << "generation runs on the CPU backend";
  const float scale = 1.0f / std::sqrt(static_cast<float>(config.kv_channels));
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    cached_cores_.push_back(std::make_unique<KvCacheAttention>(cache_, layer, scale));
  }
  full_core_ = std::make_unique<LocalAttention>(scale);
  for (const ParamSpec& spec : build_param_specs(config)) {
    GPT_CHECK(params.count(spec.name)) << "parameter " << spec.name << " missing";
    GPT_CHECK_EQ(static_cast<int64_t>(params.at(spec.name).size()), spec.global_numel()) << spec.name;
  }
}

const float* InferenceModel::param(const std::string& name) const {
  auto it = params_.find(name);
  GPT_CHECK(it != params_.end()) << "parameter " << name;
  return it->second.data();
}

Tensor InferenceModel::host(std::vector<float>& buffer, Shape shape) {
  if (static_cast<int64_t>(buffer.size()) < shape.numel()) buffer.resize(static_cast<size_t>(shape.numel()));
  return Tensor(buffer.data(), DType::kFloat32, shape, Device::kCpu);
}

Tensor InferenceModel::weight(const std::string& name, Shape shape) const {
  return Tensor(const_cast<float*>(param(name)), DType::kFloat32, shape, Device::kCpu);
}

Tensor InferenceModel::bias(const std::string& name, int64_t size) const {
  if (!config_.add_bias_linear) return Tensor();
  return weight(name, Shape{size});
}

void InferenceModel::forward_cached(std::span<const Segment> segments, std::vector<float>& logits) {
  run(segments, true, logits);
}

void InferenceModel::forward_full(std::span<const int32_t> tokens, std::vector<float>& logits) {
  const Segment segment{.sequence = 0, .tokens = tokens};
  run(std::span<const Segment>(&segment, 1), false, logits);
}

void InferenceModel::run(std::span<const Segment> segments, bool cached, std::vector<float>& logits) {
  const ModelConfig& c = config_;
  const int64_t h = c.hidden_size, d = c.kv_channels, heads = c.num_attention_heads, groups = c.query_groups();
  const int64_t q = c.queries_per_group(), qkv_size = c.qkv_size(), projection = heads * d;
  const int64_t ffn = c.ffn_hidden_size, fc1_size = c.fc1_size(), vocab = c.padded_vocab_size;
  const float eps = c.layernorm_epsilon;
  const bool rms = c.normalization == Normalization::kRMSNorm;
  const bool rope = c.position_embedding == PositionEmbedding::kRope;

  // Rows in segment order, each with its absolute position.
  std::vector<Row> rows;
  for (const Segment& segment : segments) {
    GPT_CHECK(!segment.tokens.empty()) << "an empty segment";
    const int64_t start = cached ? cache_.length(segment.sequence) : 0;
    GPT_CHECK(!cached || start + static_cast<int64_t>(segment.tokens.size()) <= cache_.capacity())
        << "sequence " << segment.sequence << " exceeds its KV cache";
    for (size_t t = 0; t < segment.tokens.size(); ++t) {
      GPT_CHECK(segment.tokens[t] >= 0 && segment.tokens[t] < vocab) << "token id " << segment.tokens[t];
      rows.push_back({segment.tokens[t], start + static_cast<int64_t>(t)});
    }
  }
  const auto n = static_cast<int64_t>(rows.size());

  // Embedding: word row (+ learned position row), FP32.
  Tensor x = host(x_, {n, h});
  {
    const float* wte = param(kWordEmbeddingName);
    const float* wpe =
        c.position_embedding == PositionEmbedding::kLearnedAbsolute ? param("embedding.position_embeddings.weight") : nullptr;
    float* out = x.data_as<float>();
    for (int64_t r = 0; r < n; ++r) {
      GPT_CHECK(!wpe || rows[r].position < c.max_position_embeddings) << "position " << rows[r].position
                                                                      << " beyond the position table";
      const float* word = wte + rows[r].token * h;
      for (int64_t i = 0; i < h; ++i) out[r * h + i] = wpe ? word[i] + wpe[rows[r].position * h + i] : word[i];
    }
  }
  Tensor ln = host(ln_, {n, h}), mean = host(mean_, {n}), rstd = host(rstd_, {n});
  Tensor qkv = host(qkv_, {n, qkv_size}), attention = host(attention_, {n, projection});
  Tensor proj = host(proj_, {n, h}), residual = host(residual_, {n, h});
  Tensor fc1 = host(fc1_, {n, fc1_size}), act = host(act_, {n, ffn}), mlp = host(mlp_, {n, h});
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    const std::string p = "decoder.layers." + std::to_string(layer) + ".";
    auto norm = [&](const std::string& name, const Tensor& y, const Tensor& input) {
      if (rms) {
        ops::rmsnorm_forward(ctx_, y, rstd, input, weight(name + ".weight", {h}), eps);
      } else {
        ops::layernorm_forward(ctx_, y, mean, rstd, input, weight(name + ".weight", {h}), weight(name + ".bias", {h}), eps);
      }
    };
    norm(p + "input_layernorm", ln, x);
    ops::matmul(ctx_, qkv, ln, weight(p + "self_attention.linear_qkv.weight", {qkv_size, h}),
                {.transpose_b = true, .bias = bias(p + "self_attention.linear_qkv.bias", qkv_size)});
    // Attention, one segment (sequence) at a time.
    int64_t first = 0;
    for (const Segment& segment : segments) {
      const auto s = static_cast<int64_t>(segment.tokens.size());
      float* qkv_rows = qkv.data_as<float>() + first * qkv_size;
      const Tensor qkv_view(qkv_rows, DType::kFloat32, Shape{s, 1, groups, (q + 2) * d}, Device::kCpu);
      const Tensor out_view(attention.data_as<float>() + first * projection, DType::kFloat32, Shape{s, 1, heads, d},
                            Device::kCpu);
      const Tensor lse = host(lse_, {1, heads, s});
      if (cached) {
        if (rope) {
          for (int64_t t = 0; t < s; ++t) {
            rope_at_position(qkv_rows + t * qkv_size, groups, q, d, c.rotary_dim, c.rotary_base, rows[first + t].position,
                             c.rotary_interleaved);
          }
        }
        KvCacheAttention& core = *cached_cores_[static_cast<size_t>(layer)];
        core.select(segment.sequence);
        core.forward(ctx_, out_view, lse, qkv_view, ops::DropoutMask{});
      } else {
        if (rope) ops::rope_forward(ctx_, qkv_view, d, c.rotary_dim, c.rotary_base, c.rotary_interleaved);
        full_core_->forward(ctx_, out_view, lse, qkv_view, ops::DropoutMask{});
      }
      first += s;
    }
    ops::matmul(ctx_, proj, attention, weight(p + "self_attention.linear_proj.weight", {h, projection}),
                {.transpose_b = true});
    const Tensor proj_bias = bias(p + "self_attention.linear_proj.bias", h);
    if (rms) {
      ops::residual_rmsnorm_forward(ctx_, residual, ln, rstd, x, proj, proj_bias,
                                    weight(p + "pre_mlp_layernorm.weight", {h}), eps);
    } else {
      ops::residual_layernorm_forward(ctx_, residual, ln, mean, rstd, x, proj, proj_bias,
                                      weight(p + "pre_mlp_layernorm.weight", {h}),
                                      weight(p + "pre_mlp_layernorm.bias", {h}), eps);
    }
    const Tensor fc1_weight = weight(p + "mlp.linear_fc1.weight", {fc1_size, h});
    const Tensor fc1_bias = bias(p + "mlp.linear_fc1.bias", fc1_size);
    if (c.swiglu) {
      ops::matmul(ctx_, fc1, ln, fc1_weight, {.transpose_b = true, .bias = fc1_bias});
      ops::swiglu_forward(ctx_, act, fc1);
    } else if (c.exact_gelu) {
      ops::matmul(ctx_, fc1, ln, fc1_weight, {.transpose_b = true, .bias = fc1_bias});
      ops::gelu_exact_forward(ctx_, act, fc1);
    } else {
      ops::matmul(ctx_, act, ln, fc1_weight, {.transpose_b = true, .bias = fc1_bias, .pre_gelu = fc1});
    }
    ops::matmul(ctx_, mlp, act, weight(p + "mlp.linear_fc2.weight", {h, ffn}), {.transpose_b = true});
    ops::residual_add(ctx_, x, residual, mlp, bias(p + "mlp.linear_fc2.bias", h));
  }
  if (cached) {
    for (const Segment& segment : segments) cache_.advance(segment.sequence, static_cast<int64_t>(segment.tokens.size()));
  }
  // The final norm and the LM head on each segment's last row only.
  const auto m = static_cast<int64_t>(segments.size());
  Tensor last = host(last_, {m, h});
  {
    int64_t end = 0;
    for (int64_t i = 0; i < m; ++i) {
      end += static_cast<int64_t>(segments[static_cast<size_t>(i)].tokens.size());
      std::copy(x_.data() + (end - 1) * h, x_.data() + end * h, last_.data() + i * h);
    }
  }
  Tensor final_ln = host(ln_, {m, h});
  Tensor final_mean = host(mean_, {m}), final_rstd = host(rstd_, {m});
  if (rms) {
    ops::rmsnorm_forward(ctx_, final_ln, final_rstd, last, weight("decoder.final_layernorm.weight", {h}), eps);
  } else {
    ops::layernorm_forward(ctx_, final_ln, final_mean, final_rstd, last, weight("decoder.final_layernorm.weight", {h}),
                           weight("decoder.final_layernorm.bias", {h}), eps);
  }
  logits.resize(static_cast<size_t>(m * vocab));
  const std::string head = c.untie_embeddings_and_output_weights ? "output_layer.weight" : kWordEmbeddingName;
  ops::matmul(ctx_, Tensor(logits.data(), DType::kFloat32, Shape{m, vocab}, Device::kCpu), final_ln,
              weight(head, {vocab, h}), {.transpose_b = true});
}

}  // namespace gpt
