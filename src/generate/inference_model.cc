#include "generate/inference_model.h"

#include <algorithm>
#include <cmath>

#include "kernels/ops.h"
#include "model/attention_block.h"
#include "model/mlp_block.h"
#include "model/param_registry.h"
#include "model/transformer_layer.h"

namespace gpt {

InferenceModel::Widths InferenceModel::widths(const ModelConfig& c, const TensorSlice& slice) {
  const int64_t tp = slice.size, vocab_local = vocab_rows_per_rank(c.padded_vocab_size, static_cast<int>(tp));
  return {.h = c.hidden_size,
          .d = c.kv_channels,
          .heads = c.num_attention_heads / tp,
          .groups = c.query_groups() / tp,
          .q = c.queries_per_group(),
          .qkv = c.qkv_size() / tp,
          .projection = c.num_attention_heads / tp * c.kv_channels,
          .ffn = c.ffn_hidden_size / tp,
          .fc1 = c.fc1_size() / tp,
          .vocab = c.padded_vocab_size,
          .vocab_local = vocab_local,
          .vocab_first = slice.rank * vocab_local};
}

void rope_at_position(float* qkv_row, int64_t groups, int64_t queries_per_group, int64_t head_dim,
                      int64_t rotary_dim, const RopeFrequencies& frequencies, int64_t position, bool interleaved) {
  Context host = Context::cpu(1);
  const Tensor row(qkv_row, DType::kFloat32, Shape{1, 1, groups, (queries_per_group + 2) * head_dim}, Device::kCpu);
  ops::rope_forward(host, row, head_dim, rotary_dim, frequencies, position, interleaved);
}

InferenceModel::InferenceModel(const ModelConfig& config, const std::map<std::string, std::vector<float>>& params,
                               Context& ctx, int64_t sequences, int64_t capacity, Communicator* tensor_group)
    : config_(config),
      tensor_group_(tensor_group),
      slice_{.rank = tensor_group ? tensor_group->rank() : 0, .size = tensor_group ? tensor_group->size() : 1},
      w_(widths(config, slice_)),
      params_(params),
      ctx_(ctx),
      host_ctx_(ctx.device() == Device::kCpu ? ctx : Context::cpu(std::max(1, ctx.cpu_threads()))),
      cache_(config, sequences, capacity, slice_.size) {
  const absl::Status divisible = check_tensor_parallel(config, slice_.size);
  GPT_CHECK(divisible.ok()) << divisible.message();
  const float scale = 1.0f / std::sqrt(static_cast<float>(config.kv_channels));
  for (int64_t layer = 0; layer < config.num_layers; ++layer) {
    cached_cores_.push_back(std::make_unique<KvCacheAttention>(cache_, layer, scale));
  }
  full_core_ = std::make_unique<LocalAttention>(scale);
  if (config.moe.enabled()) moe_ = std::make_unique<InferenceMoe>(config, slice_, params, ctx);
  for (const ParamSpec& spec : build_param_specs(config)) {
    GPT_CHECK(params.count(spec.name)) << "parameter " << spec.name << " missing";
    const std::vector<float>& values = params.at(spec.name);
    GPT_CHECK_EQ(static_cast<int64_t>(values.size()), param_slice(spec, config, slice_).local_numel())
        << spec.name << " on tensor-parallel rank " << slice_.rank << " of " << slice_.size;
    if (ctx.device() != Device::kCpu) {
      Buffer uploaded(ctx.device(), values.size() * sizeof(float));
      copy_bytes(ctx.device(), uploaded.data(), Device::kCpu, values.data(), values.size() * sizeof(float));
      device_params_.emplace(spec.name, std::move(uploaded));
    }
  }
}

const float* InferenceModel::param(const std::string& name) const {
  auto it = params_.find(name);
  GPT_CHECK(it != params_.end()) << "parameter " << name;
  return it->second.data();
}

Tensor InferenceModel::scratch(Buffer& buffer, Shape shape) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * sizeof(float);
  if (buffer.bytes() < bytes) buffer = Buffer(ctx_.device(), bytes);
  return buffer.as_tensor(DType::kFloat32, shape);
}

Tensor InferenceModel::host(std::vector<float>& buffer, Shape shape) {
  if (static_cast<int64_t>(buffer.size()) < shape.numel()) buffer.resize(static_cast<size_t>(shape.numel()));
  return Tensor(buffer.data(), DType::kFloat32, shape, Device::kCpu);
}

Tensor InferenceModel::weight(const std::string& name, Shape shape) const {
  if (ctx_.device() != Device::kCpu) {
    auto it = device_params_.find(name);
    GPT_CHECK(it != device_params_.end()) << "parameter " << name;
    return it->second.as_tensor(DType::kFloat32, shape);
  }
  return Tensor(const_cast<float*>(param(name)), DType::kFloat32, shape, Device::kCpu);
}

Tensor InferenceModel::bias(const std::string& name, int64_t size) const {
  const bool qkv = name.ends_with("linear_qkv.bias");
  if (!(qkv ? config_.has_qkv_bias() : config_.add_bias_linear)) return Tensor();
  return weight(name, Shape{size});
}

void InferenceModel::reduce(const Tensor& partial) {
  if (slice_.size > 1) tensor_group_->all_reduce(partial.device() == Device::kCpu ? host_ctx_ : ctx_, partial, ReduceOp::kSum);
}

void InferenceModel::forward_cached(std::span<const Segment> segments, std::vector<float>& logits) {
  run(segments, true, logits);
}

void InferenceModel::forward_full(std::span<const int32_t> tokens, std::vector<float>& logits) {
  const Segment segment{.sequence = 0, .tokens = tokens};
  run(std::span<const Segment>(&segment, 1), false, logits);
}

NormForward InferenceModel::norm(const std::string& name, int64_t width) const {
  return NormForward::of(config_, weight(name + ".weight", {width}),
                         config_.has_layernorm_bias() ? weight(name + ".bias", {width}) : Tensor());
}

std::vector<InferenceModel::Row> InferenceModel::rows_of(std::span<const Segment> segments, bool cached) const {
  std::vector<Row> rows;
  for (const Segment& segment : segments) {
    GPT_CHECK(!segment.tokens.empty()) << "an empty segment";
    const int64_t start = cached ? cache_.length(segment.sequence) : 0;
    GPT_CHECK(!cached || start + static_cast<int64_t>(segment.tokens.size()) <= cache_.capacity())
        << "sequence " << segment.sequence << " exceeds its KV cache";
    for (size_t t = 0; t < segment.tokens.size(); ++t) {
      GPT_CHECK(segment.tokens[t] >= 0 && segment.tokens[t] < w_.vocab) << "token id " << segment.tokens[t];
      rows.push_back({segment.tokens[t], start + static_cast<int64_t>(t)});
    }
  }
  return rows;
}

// On the host: word row (vocabulary-parallel: the rank holding the row contributes it, the others
// zeros, summed exactly over the group) + learned position row, FP32; then onto the device (a copy
// within the host on the CPU).
void InferenceModel::embed(const std::vector<Row>& rows, const Tensor& x) {
  const int64_t n = static_cast<int64_t>(rows.size()), h = w_.h;
  const Tensor embedded = host(embedded_, {n, h});
  const float* wte = param(kWordEmbeddingName);
  float* out = embedded.data_as<float>();
  for (int64_t r = 0; r < n; ++r) {
    const int64_t local_row = rows[r].token - w_.vocab_first;
    if (local_row >= 0 && local_row < w_.vocab_local) {
      std::copy(wte + local_row * h, wte + (local_row + 1) * h, out + r * h);
    } else {
      std::fill(out + r * h, out + (r + 1) * h, 0.0f);
    }
  }
  reduce(embedded);
  if (config_.position_embedding == PositionEmbedding::kLearnedAbsolute) {
    const float* wpe = param("embedding.position_embeddings.weight");
    for (int64_t r = 0; r < n; ++r) {
      GPT_CHECK(rows[r].position < config_.max_position_embeddings) << "position " << rows[r].position
                                                                    << " beyond the position table";
      for (int64_t i = 0; i < h; ++i) out[r * h + i] += wpe[rows[r].position * h + i];
    }
  }
  copy_tensor(x, embedded);
}

void InferenceModel::run(std::span<const Segment> segments, bool cached, std::vector<float>& logits) {
  const std::vector<Row> rows = rows_of(segments, cached);
  const Tensor x = scratch(x_, {static_cast<int64_t>(rows.size()), w_.h});
  embed(rows, x);
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) layer_forward(layer, segments, rows, cached, x);
  if (cached) {
    for (const Segment& segment : segments) {
      cache_.advance(segment.sequence, static_cast<int64_t>(segment.tokens.size()));
    }
  }
  head(segments, x, logits);
}

// The layer's op sequence (model/transformer_layer.h's layer_forward_up and layer_forward_output)
// on the n rows, in place on x [n, h]; N1 and N2 share ln, mean and rstd (qkv's GEMM has read N1's
// output before N2 writes). The scratch keeps its size across the layers.
void InferenceModel::layer_forward(int64_t layer, std::span<const Segment> segments, const std::vector<Row>& rows,
                                   bool cached, const Tensor& x) {
  const Widths& w = w_;
  const int64_t n = static_cast<int64_t>(rows.size()), h = w.h;
  const Tensor ln = scratch(ln_, {n, h}), mean = scratch(mean_, {n}), rstd = scratch(rstd_, {n});
  const Tensor residual = scratch(residual_, {n, h});
  const Tensor mlp = scratch(mlp_, {n, h});
  const std::string p = "decoder.layers." + std::to_string(layer) + ".";
  if (config_.moe.is_moe_layer(layer)) {
    // The MoE block's partial sums, reduced over the group; its biases are inside (weighted).
    layer_forward_up(
        ctx_, norm(p + "input_layernorm", h), norm(p + "pre_mlp_layernorm", h),
        LayerStream{ln, mean, rstd, residual, ln, mean, rstd}, x,
        [&](const Tensor& a) { return attention_block(layer, segments, rows, cached, a); },
        [&](const Tensor& b) {
          moe_->forward(layer, b, mlp, [this](const std::string& name, Shape shape) { return weight(name, shape); });
        });
    reduce(mlp);
    layer_forward_output(ctx_, x, residual, BlockOutput{.delta = mlp});
    return;
  }
  const Tensor fc1 = scratch(fc1_, {n, w.fc1}), act = scratch(act_, {n, w.ffn});
  const Tensor fc1_weight = weight(p + "mlp.linear_fc1.weight", {w.fc1, h});
  const Tensor fc1_bias = bias(p + "mlp.linear_fc1.bias", w.fc1);
  layer_forward_up(
      ctx_, norm(p + "input_layernorm", h), norm(p + "pre_mlp_layernorm", h),
      LayerStream{ln, mean, rstd, residual, ln, mean, rstd}, x,
      [&](const Tensor& a) { return attention_block(layer, segments, rows, cached, a); },
      [&](const Tensor& b) {
        // fc1 and the activation: the MLP block's op sequence (model/mlp_block.h) on this GEMM.
        mlp_up_forward(ctx_, mlp_activation(config_), fc1, act, [&](const Tensor& out, const Tensor& pre_gelu) {
          ops::matmul(ctx_, out, b, fc1_weight, {.transpose_b = true, .bias = fc1_bias, .pre_gelu = pre_gelu});
        });
      });
  // fc2, row-parallel: the partial sums reduced before the bias, which the residual add adds.
  ops::matmul(ctx_, mlp, act, weight(p + "mlp.linear_fc2.weight", {h, w.ffn}), {.transpose_b = true});
  reduce(mlp);
  layer_forward_output(ctx_, x, residual, BlockOutput{.delta = mlp, .bias = bias(p + "mlp.linear_fc2.bias", h)});
}

BlockOutput InferenceModel::attention_block(int64_t layer, std::span<const Segment> segments,
                                            const std::vector<Row>& rows, bool cached, const Tensor& a) {
  const Widths& w = w_;
  const int64_t n = static_cast<int64_t>(rows.size()), h = w.h;
  const Tensor qkv = scratch(qkv_, {n, w.qkv}), attention = scratch(attention_, {n, w.projection});
  const Tensor proj = scratch(proj_, {n, h});
  const std::string p = "decoder.layers." + std::to_string(layer) + ".self_attention.";
  ops::matmul(ctx_, qkv, a, weight(p + "linear_qkv.weight", {w.qkv, h}),
              {.transpose_b = true, .bias = bias(p + "linear_qkv.bias", w.qkv)});
  if (config_.qk_layernorm) qk_norm(p, qkv);
  attend(layer, segments, rows, cached, qkv, attention);
  ops::matmul(ctx_, proj, attention, weight(p + "linear_proj.weight", {h, w.projection}), {.transpose_b = true});
  reduce(proj);
  return {.delta = proj, .bias = bias(p + "linear_proj.bias", h)};
}

void InferenceModel::qk_norm(const std::string& prefix, const Tensor& qkv) {
  // model/attention_block.h's apply_to_qk_heads, as training: every query head and every key head
  // of the n rows normalized in place over its d dims before RoPE.
  const Widths& w = w_;
  const int64_t n = qkv.rows(), d = w.d;
  const Tensor heads_rows = scratch(qk_rows_, {n * w.heads, d});
  const Tensor head_mean = scratch(qk_mean_, {n * w.heads}), head_rstd = scratch(qk_rstd_, {n * w.heads});
  const Tensor keys = heads_rows.flat_range(0, n * w.groups * d).view({n * w.groups, d});
  apply_to_qk_heads(ctx_, qkv.view({n * w.groups, (w.q + 2) * d}), w.q, d, heads_rows, heads_rows, keys, keys,
                    [&](bool key, const Tensor& y, const Tensor& rows_of_d) {
                      const int64_t head_rows = rows_of_d.rows();
                      norm(prefix + (key ? "k_layernorm" : "q_layernorm"), d)
                          .forward(ctx_, y, head_mean.flat_range(0, head_rows), head_rstd.flat_range(0, head_rows),
                                   rows_of_d);
                    });
}

void InferenceModel::attend(int64_t layer, std::span<const Segment> segments, const std::vector<Row>& rows,
                            bool cached, const Tensor& qkv, const Tensor& attention) {
  const ModelConfig& c = config_;
  const Widths& w = w_;
  const bool rope = c.position_embedding == PositionEmbedding::kRope;
  const Device device = ctx_.device();
  const bool on_host = device == Device::kCpu;
  int64_t first = 0;
  for (const Segment& segment : segments) {
    const auto s = static_cast<int64_t>(segment.tokens.size());
    float* qkv_rows = qkv.data_as<float>() + first * w.qkv;
    float* out_rows = attention.data_as<float>() + first * w.projection;
    if (cached) {
      // On the host: the segment's qkv rows (staged from a GPU), RoPE at the absolute positions,
      // the KV cache's attention, its output rows (staged back).
      float* qkv_host = qkv_rows;
      float* out_host = out_rows;
      if (!on_host) {
        qkv_host = host(qkv_host_, {s, w.qkv}).data_as<float>();
        out_host = host(attention_host_, {s, w.projection}).data_as<float>();
        copy_bytes(Device::kCpu, qkv_host, device, qkv_rows, static_cast<size_t>(s * w.qkv) * sizeof(float));
      }
      // The segment's rows hold consecutive positions from its first row's: RoPE's offset.
      const Tensor qkv_segment(qkv_host, DType::kFloat32, Shape{s, 1, w.groups, (w.q + 2) * w.d}, Device::kCpu);
      if (rope) {
        ops::rope_forward(host_ctx_, qkv_segment, w.d, c.rotary_dim, c.rope_frequencies(), rows[first].position,
                          c.rotary_interleaved);
      }
      KvCacheAttention& core = *cached_cores_[static_cast<size_t>(layer)];
      core.select(segment.sequence);
      core.forward(host_ctx_, Tensor(out_host, DType::kFloat32, Shape{s, 1, w.heads, w.d}, Device::kCpu),
                   host(lse_host_, {1, w.heads, s}), qkv_segment, ops::DropoutMask{});
      if (!on_host) {
        copy_bytes(device, out_rows, Device::kCpu, out_host, static_cast<size_t>(s * w.projection) * sizeof(float));
      }
    } else {
      // The training path's RoPE op and attention core, on the device.
      const Tensor qkv_view(qkv_rows, DType::kFloat32, Shape{s, 1, w.groups, (w.q + 2) * w.d}, device);
      const Tensor out_view(out_rows, DType::kFloat32, Shape{s, 1, w.heads, w.d}, device);
      if (rope) ops::rope_forward(ctx_, qkv_view, w.d, c.rotary_dim, c.rope_frequencies(), 0, c.rotary_interleaved);
      full_core_->forward(ctx_, out_view, scratch(lse_, {1, w.heads, s}), qkv_view, ops::DropoutMask{});
    }
    first += s;
  }
}

// The final norm and the LM head on each segment's last row only.
void InferenceModel::head(std::span<const Segment> segments, const Tensor& x, std::vector<float>& logits) {
  const Widths& w = w_;
  const int64_t h = w.h, tp = slice_.size, vocab = w.vocab, vocab_local = w.vocab_local;
  const Device device = ctx_.device();
  const bool on_host = device == Device::kCpu;
  const auto m = static_cast<int64_t>(segments.size());
  const Tensor last = scratch(last_, {m, h});
  int64_t end = 0;
  for (int64_t i = 0; i < m; ++i) {
    end += static_cast<int64_t>(segments[static_cast<size_t>(i)].tokens.size());
    copy_bytes(device, last.data_as<float>() + i * h, device, x.data_as<float>() + (end - 1) * h,
               static_cast<size_t>(h) * sizeof(float));
  }
  const Tensor final_ln = scratch(ln_, {m, h});
  norm("decoder.final_layernorm", h).forward(ctx_, final_ln, scratch(mean_, {m}), scratch(rstd_, {m}), last);
  logits.resize(static_cast<size_t>(m * vocab));
  const std::string head = config_.untie_embeddings_and_output_weights ? "output_layer.weight" : kWordEmbeddingName;
  // This rank's logits [m, vocab_l] (all of them with one rank), on the host.
  const Tensor local_host = tp == 1 ? Tensor(logits.data(), DType::kFloat32, Shape{m, vocab}, Device::kCpu)
                                    : host(local_logits_, {m, vocab_local});
  const Tensor local = on_host ? local_host : scratch(logits_, {m, vocab_local});
  ops::matmul(ctx_, local, final_ln, weight(head, {vocab_local, h}), {.transpose_b = true});
  if (!on_host) copy_tensor(local_host, local);
  if (tp == 1) return;
  // Vocabulary-parallel LM head: the local logits all-gathered to [tp, m, vocab_l] and laid out as
  // [m, padded_vocab] (rows past the padded vocabulary dropped). Every rank gets the same bytes,
  // so every rank samples the same token.
  const Tensor gathered = host(gathered_logits_, {tp, m, vocab_local});
  tensor_group_->all_gather(host_ctx_, gathered, local_host);
  for (int64_t rank = 0; rank < tp; ++rank) {
    const int64_t begin = rank * vocab_local, count = std::min(vocab_local, vocab - begin);
    for (int64_t i = 0; count > 0 && i < m; ++i) {
      const float* from = gathered_logits_.data() + (rank * m + i) * vocab_local;
      std::copy(from, from + count, logits.data() + i * vocab + begin);
    }
  }
}

}  // namespace gpt
