// Hugging Face's mixture-of-experts families for ckpt_tool (src/hf/hf_checkpoint.h's export and
// import), from transformers' modeling_mixtral.py and modeling_qwen3_moe.py:
//
//   MixtralForCausalLM: Llama's attention and norms; every layer's MLP a sparse MoE block:
//     logits = x gate^T [T, E], w = softmax(logits), the top k of w renormalized to sum 1, then
//     y = sum_j w_j w2_e(silu(w1_e x) * w3_e x). Megatron's softmax router with the softmax over
//     the top-k logits (the default, not --moe-router-pre-softmax) is the same function; SwiGLU
//     experts with fc1_e = [w1_e; w3_e] (gate first), fc2_e = w2_e; no biases, no shared expert.
//   Qwen3MoeForCausalLM: Llama's layout plus per-head RMSNorms of the queries and keys before RoPE
//     (q_norm / k_norm [head_dim], Megatron's --qk-layernorm with RMSNorm); layer i is MoE unless
//     i is in mlp_only_layers or (i + 1) % decoder_sparse_step != 0 (then a dense MLP of
//     intermediate_size), experts moe_intermediate_size wide; norm_topk_prob true renormalizes the
//     top k (Megatron's default), false keeps the top k of the full softmax as they are
//     (--moe-router-pre-softmax). No shared expert (Qwen2-MoE's is not exported here).
//
// The family follows from the saved arguments: --qk-layernorm makes a Qwen3-MoE (Mixtral has no
// query/key norms), otherwise Mixtral (which then needs every layer MoE and the softmax after the
// top-k). What neither holds (sigmoid scores, group-limited routing, a scaling factor, expert bias,
// shared experts, linear biases, GeLU experts) is refused with the reason. A run's capacity
// factor is not carried: both families, as generate, route every token to its k experts.
//
// Load-balancing coefficients: Hugging Face's router_aux_loss_coef multiplies one loss pooled over
// all layers' router logits, with token fractions summing to k; Megatron's --moe-aux-loss-coeff
// multiplies a per-layer loss with fractions divided by k, summed over layers. The two agree when
// the layers route alike with coeff_megatron = router_aux_loss_coef k / L_moe, the conversion both
// directions use (training-only settings: the forward does not depend on them).
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "core/status.h"
#include "hf/hf_checkpoint.h"
#include "hf/json_config.h"
#include "model/config.h"

namespace gpt {

bool is_hf_moe_family(HfFamily family);
// "mixtral" / "qwen3_moe": whether config.json's model_type is one of these families.
bool is_hf_moe_model_type(const std::string& model_type);
const char* hf_architecture(HfFamily family);

// The family of an MoE configuration (config.moe.enabled()), or why none holds it.
absl::StatusOr<HfFamily> hf_moe_family(const ModelConfig& config);
// The tensor table (as hf_mappings: every Hugging Face tensor from ours).
std::vector<HfMapping> hf_moe_mappings(const ModelConfig& config, HfFamily family);
// config.json; `ids` the eos/bos lines (each "  \"key\": value,\n") to put first.
std::string hf_moe_config_json(const ModelConfig& config, HfFamily family, const std::string& ids);

// Import: after the Llama fields of `j` are read into `config`, the family's own fields (experts,
// routing, which layers are MoE, Qwen3's q/k norms); what does not map is refused.
absl::StatusOr<HfFamily> read_hf_moe_config(const JsonConfig& j, ModelConfig& config);
// The saved-argument lines an imported MoE checkpoint adds to the dense ones: --qk-layernorm and
// the MoE flags, spelled as pretrain_gpt saves them (canonical_arguments), which the import's
// check (pretrain_gpt's validate_saved_arguments) then judges with the rest.
std::string hf_moe_import_arguments(const ModelConfig& config);
// hf_table_size of an MoE family: the embedding and head, plus each dense and each MoE layer's tensors.
std::optional<HfTableSize> hf_moe_table_size(const ModelConfig& config, HfFamily family);

}  // namespace gpt
