// The tables of hf/hf_checkpoint.h: for every Hugging Face tensor of a GPT-2 or Llama model, the
// parameter of ours it comes from and, per element, the element of ours it is.
#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/checked_math.h"
#include "generate/checkpoint_model.h"
#include "hf/hf_checkpoint.h"
#include "hf/hf_moe.h"
#include "model/param_registry.h"

namespace gpt {
namespace {

// An HF [in, out] Conv1D weight from ours [out, in].
std::function<int64_t(int64_t)> transposed(int64_t in, int64_t out) {
  return [in, out](int64_t i) { return (i % out) * in + i / out; };
}
std::function<int64_t(int64_t)> identity(int64_t offset = 0) {
  return [offset](int64_t i) { return i + offset; };
}

std::vector<HfMapping> gpt2_mappings(const ModelConfig& c) {
  std::vector<HfMapping> m;
  const int64_t h = c.hidden_size, heads = c.num_attention_heads, d = c.kv_channels, ffn = c.ffn_hidden_size;
  const int64_t v = c.vocab_size;
  // HF's c_attn output column (which * heads + head) * d + e is our QKV row (head * 3 + which) * d + e.
  auto qkv_row = [heads, d](int64_t column) {
    const int64_t which = column / (heads * d), head = (column / d) % heads, e = column % d;
    return (head * 3 + which) * d + e;
  };
  m.push_back({"transformer.wte.weight", {v, h}, kWordEmbeddingName, identity()});
  m.push_back({"transformer.wpe.weight", {c.max_position_embeddings, h}, "embedding.position_embeddings.weight", identity()});
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    const std::string ours = absl::StrCat("decoder.layers.", layer, ".");
    const std::string hf = absl::StrCat("transformer.h.", layer, ".");
    for (const char* p : {"weight", "bias"}) m.push_back({hf + "ln_1." + p, {h}, ours + "input_layernorm." + p, identity()});
    m.push_back({hf + "attn.c_attn.weight", {h, 3 * h}, ours + "self_attention.linear_qkv.weight",
                 [h, qkv_row](int64_t i) { return qkv_row(i % (3 * h)) * h + i / (3 * h); }});
    m.push_back({hf + "attn.c_attn.bias", {3 * h}, ours + "self_attention.linear_qkv.bias", qkv_row});
    m.push_back({hf + "attn.c_proj.weight", {h, h}, ours + "self_attention.linear_proj.weight", transposed(h, h)});
    m.push_back({hf + "attn.c_proj.bias", {h}, ours + "self_attention.linear_proj.bias", identity()});
    for (const char* p : {"weight", "bias"}) m.push_back({hf + "ln_2." + p, {h}, ours + "pre_mlp_layernorm." + p, identity()});
    m.push_back({hf + "mlp.c_fc.weight", {h, ffn}, ours + "mlp.linear_fc1.weight", transposed(h, ffn)});
    m.push_back({hf + "mlp.c_fc.bias", {ffn}, ours + "mlp.linear_fc1.bias", identity()});
    m.push_back({hf + "mlp.c_proj.weight", {ffn, h}, ours + "mlp.linear_fc2.weight", transposed(ffn, h)});
    m.push_back({hf + "mlp.c_proj.bias", {h}, ours + "mlp.linear_fc2.bias", identity()});
  }
  for (const char* p : {"weight", "bias"}) {
    m.push_back({std::string("transformer.ln_f.") + p, {h}, std::string("decoder.final_layernorm.") + p, identity()});
  }
  if (c.untie_embeddings_and_output_weights) m.push_back({"lm_head.weight", {v, h}, "output_layer.weight", identity()});
  return m;
}

std::vector<HfMapping> llama_mappings(const ModelConfig& c) {
  std::vector<HfMapping> m;
  const int64_t h = c.hidden_size, heads = c.num_attention_heads, d = c.kv_channels, ffn = c.ffn_hidden_size;
  const int64_t groups = c.query_groups(), q = c.queries_per_group(), v = c.vocab_size;
  // Our QKV rows [groups, (q queries, key, value), d]; HF's q_proj rows [heads, d] (head g * q + j),
  // k_proj and v_proj rows [groups, d].
  auto query_row = [q, d](int64_t r) { const int64_t head = r / d, g = head / q, j = head % q; return (g * (q + 2) + j) * d + r % d; };
  auto key_row = [q, d](int64_t r) { return ((r / d) * (q + 2) + q) * d + r % d; };
  auto value_row = [q, d](int64_t r) { return ((r / d) * (q + 2) + q + 1) * d + r % d; };
  auto rows_of = [h](std::function<int64_t(int64_t)> row) {
    return [h, row](int64_t i) { return row(i / h) * h + i % h; };
  };
  m.push_back({"model.embed_tokens.weight", {v, h}, kWordEmbeddingName, identity()});
  // Biases: q, k and v with --add-qkv-bias (Qwen2) or with every linear's (Llama's attention_bias =
  // mlp_bias); o_proj and the MLP with every linear's.
  const bool bias = c.add_bias_linear, qkv_bias = c.has_qkv_bias();
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    const std::string ours = absl::StrCat("decoder.layers.", layer, ".");
    const std::string hf = absl::StrCat("model.layers.", layer, ".");
    const std::string qkv = ours + "self_attention.linear_qkv.";
    m.push_back({hf + "input_layernorm.weight", {h}, ours + "input_layernorm.weight", identity()});
    m.push_back({hf + "self_attn.q_proj.weight", {heads * d, h}, qkv + "weight", rows_of(query_row)});
    m.push_back({hf + "self_attn.k_proj.weight", {groups * d, h}, qkv + "weight", rows_of(key_row)});
    m.push_back({hf + "self_attn.v_proj.weight", {groups * d, h}, qkv + "weight", rows_of(value_row)});
    if (qkv_bias) {
      m.push_back({hf + "self_attn.q_proj.bias", {heads * d}, qkv + "bias", query_row});
      m.push_back({hf + "self_attn.k_proj.bias", {groups * d}, qkv + "bias", key_row});
      m.push_back({hf + "self_attn.v_proj.bias", {groups * d}, qkv + "bias", value_row});
    }
    m.push_back({hf + "self_attn.o_proj.weight", {h, heads * d}, ours + "self_attention.linear_proj.weight", identity()});
    if (bias) m.push_back({hf + "self_attn.o_proj.bias", {h}, ours + "self_attention.linear_proj.bias", identity()});
    m.push_back({hf + "post_attention_layernorm.weight", {h}, ours + "pre_mlp_layernorm.weight", identity()});
    // fc1 is [gate; up].
    m.push_back({hf + "mlp.gate_proj.weight", {ffn, h}, ours + "mlp.linear_fc1.weight", identity()});
    m.push_back({hf + "mlp.up_proj.weight", {ffn, h}, ours + "mlp.linear_fc1.weight", identity(ffn * h)});
    m.push_back({hf + "mlp.down_proj.weight", {h, ffn}, ours + "mlp.linear_fc2.weight", identity()});
    if (bias) {
      m.push_back({hf + "mlp.gate_proj.bias", {ffn}, ours + "mlp.linear_fc1.bias", identity()});
      m.push_back({hf + "mlp.up_proj.bias", {ffn}, ours + "mlp.linear_fc1.bias", identity(ffn)});
      m.push_back({hf + "mlp.down_proj.bias", {h}, ours + "mlp.linear_fc2.bias", identity()});
    }
  }
  m.push_back({"model.norm.weight", {h}, "decoder.final_layernorm.weight", identity()});
  if (c.untie_embeddings_and_output_weights) m.push_back({"lm_head.weight", {v, h}, "output_layer.weight", identity()});
  return m;
}

}  // namespace

std::vector<HfMapping> hf_mappings(const ModelConfig& config, HfFamily family) {
  if (is_hf_moe_family(family)) return hf_moe_mappings(config, family);
  return family == HfFamily::kGpt2 ? gpt2_mappings(config) : llama_mappings(config);
}

std::optional<HfTableSize> hf_table_size(const ModelConfig& config, HfFamily family) {
  if (is_hf_moe_family(family)) return hf_moe_table_size(config, family);
  // The tables repeat one block per layer: the sizes of a 0- and a 1-layer model give the rest.
  ModelConfig c = config;
  HfTableSize sizes[2];
  for (int64_t layers : {0, 1}) {
    c.num_layers = layers;
    CheckedBytes elements = 0;
    int64_t tensors = 0;
    for (const HfMapping& m : hf_mappings(c, family)) {
      CheckedBytes volume = 1;
      for (int64_t d : m.hf_shape) volume = volume * d;
      elements = elements + volume;
      ++tensors;
    }
    if (!elements.value()) return std::nullopt;
    sizes[layers] = {tensors, *elements.value()};
  }
  const CheckedBytes tensors = CheckedBytes(sizes[1].tensors - sizes[0].tensors) * config.num_layers + sizes[0].tensors;
  const CheckedBytes elements =
      CheckedBytes(sizes[1].elements - sizes[0].elements) * config.num_layers + sizes[0].elements;
  if (!tensors.value() || !elements.value()) return std::nullopt;
  return HfTableSize{*tensors.value(), *elements.value()};
}

}  // namespace gpt
