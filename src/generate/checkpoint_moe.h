// A checkpoint's mixture-of-experts settings for inference (generate, ckpt_tool export): the
// MoeConfig that pretrain_gpt built from its --num-experts / --moe-* flags (train/configs.cc's
// moe_config_from), read back from the saved arguments, and the routers' expert biases.
//
// Generation is dropless: every token goes to its k experts whatever --moe-expert-capacity-factor
// the run trained with (a capacity counts the tokens of a training microbatch; a generation step's
// batch is one token per sequence, so Megatron's capacity would mean another model at each step),
// as Hugging Face's Mixtral and Qwen3-MoE compute. The saved capacity factor is kept in the
// config only so that the banner can say so.
#pragma once

#include <map>
#include <string>
#include <vector>

#include "checkpoint/checkpoint_files.h"
#include "core/status.h"
#include "model/config.h"
#include "model/param_registry.h"  // expert_bias_name: an MoE router's expert bias, global name

namespace gpt {

// The MoE settings the saved arguments give for a model of `num_layers` layers whose dense FFN is
// `ffn_hidden_size` wide (a dense model: num_experts 0). An error names the flag that is missing
// or malformed, or a combination pretrain_gpt refuses.
absl::StatusOr<MoeConfig> saved_moe_config(const std::map<std::string, std::string>& args, int64_t num_layers,
                                           int64_t ffn_hidden_size);

// With --moe-router-enable-expert-bias: params[expert_bias_name(L)] = the checkpoint's
// model/decoder.layers.L.mlp.router.expert_bias [E] FP32 for every MoE layer L, or zeros where the
// checkpoint holds none (a bias that never moved).
absl::Status read_expert_biases(CheckpointReader& reader, const ModelConfig& config,
                                std::map<std::string, std::vector<float>>& params);

}  // namespace gpt
