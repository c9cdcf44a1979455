// --qk-layernorm's parameters in the registry: Megatron-Core's names, shapes and initial values,
// their place (after linear_qkv, before linear_proj), their gradient sum over TP, and which
// parameters take weight decay with and without --apply-wd-to-qk-layernorm, against Megatron's rule
// written out here (megatron/core/optimizer get_standard_config_overrides).
#include <string>
#include <vector>

#include "gtest/gtest.h"
#include "model/param_registry.h"
#include "support/tiny_model.h"

namespace gpt {
namespace {

bool is_qk_norm(const std::string& name) {
  return name.find("q_layernorm.") != std::string::npos || name.find("k_layernorm.") != std::string::npos;
}

// Megatron: no weight decay for 1-D parameters and biases, except that with
// apply_wd_to_qk_layernorm the q/k norms' ones decay.
bool megatron_decays(const ParamSpec& spec, bool apply_wd_to_qk_layernorm) {
  const bool one_d_or_bias = spec.global_shape.size() == 1 || spec.name.ends_with(".bias");
  return !(one_d_or_bias && !(apply_wd_to_qk_layernorm && is_qk_norm(spec.name)));
}

ModelConfig config_with(bool llama, bool qk_layernorm, bool apply_wd) {
  ModelConfig c = testing_support::tiny_model(2);
  if (llama) c = testing_support::llama_style(c);
  c.kv_channels = 6;  // not hidden / heads: the norms are of kv_channels
  c.qk_layernorm = qk_layernorm;
  c.apply_wd_to_qk_layernorm = apply_wd;
  return c;
}

TEST(QkLayerNormParams, NamesShapesPlaceAndInitialValues) {
  for (bool llama : {false, true}) {
    for (bool zero_centred : {false, true}) {
      ModelConfig c = config_with(llama, /*qk_layernorm=*/true, /*apply_wd=*/false);
      c.layernorm_zero_centered_gamma = zero_centred;
      const std::vector<ParamSpec> specs = build_param_specs(c);
      for (int64_t layer = 0; layer < c.num_layers; ++layer) {
        const std::string attention = "decoder.layers." + std::to_string(layer) + ".self_attention.";
        std::vector<std::string> expected = {attention + "q_layernorm.weight", attention + "k_layernorm.weight"};
        if (!llama) {  // LayerNorm: weight and bias each
          expected = {attention + "q_layernorm.weight", attention + "q_layernorm.bias", attention + "k_layernorm.weight",
                      attention + "k_layernorm.bias"};
        }
        size_t qkv = specs.size();
        for (size_t i = 0; i < specs.size(); ++i) {
          if (specs[i].name == attention + "linear_qkv.weight") qkv = i;
        }
        ASSERT_LT(qkv, specs.size());
        const size_t first = qkv + (llama ? 1 : 2);  // after linear_qkv's weight (and bias)
        ASSERT_LE(first + expected.size(), specs.size());
        for (size_t k = 0; k < expected.size(); ++k) {
          const ParamSpec& spec = specs[first + k];
          EXPECT_EQ(spec.name, expected[k]);
          EXPECT_EQ(spec.global_shape, std::vector<int64_t>{c.kv_channels}) << spec.name;
          EXPECT_EQ(spec.split, TensorSplit::kReplicated) << spec.name;
          EXPECT_EQ(spec.layer, layer) << spec.name;
          const float start = spec.name.ends_with(".bias") || zero_centred ? 0.0f : 1.0f;
          EXPECT_EQ(initial_value(spec, 7, 0), start) << spec.name;
          EXPECT_EQ(initial_value(spec, 7, c.kv_channels - 1), start) << spec.name;
        }
        EXPECT_EQ(specs[first + expected.size()].name, attention + "linear_proj.weight");
      }
    }
  }
}

TEST(QkLayerNormParams, WeightDecayAndGradientSumFollowMegatron) {
  for (bool llama : {false, true}) {
    for (bool qk : {false, true}) {
      for (bool apply_wd : {false, true}) {
        SCOPED_TRACE(testing::Message() << (llama ? "RMSNorm" : "LayerNorm") << " qk " << qk << " wd " << apply_wd);
        const std::vector<ParamSpec> specs = build_param_specs(config_with(llama, qk, apply_wd));
        int qk_norms = 0, decayed_qk_norms = 0;
        for (const ParamSpec& spec : specs) {
          EXPECT_EQ(spec.weight_decay, megatron_decays(spec, apply_wd)) << spec.name;
          // Summed over TP in every layout only for the q/k norms (each rank sees its heads); the
          // other replicated ones only under sequence parallelism.
          EXPECT_EQ(spec.tensor_parallel_grad, is_qk_norm(spec.name)) << spec.name;
          EXPECT_FALSE(spec.tensor_parallel_grad && spec.sequence_parallel_grad) << spec.name;
          qk_norms += is_qk_norm(spec.name) ? 1 : 0;
          decayed_qk_norms += is_qk_norm(spec.name) && spec.weight_decay ? 1 : 0;
        }
        const int per_layer = qk ? (llama ? 2 : 4) : 0;
        EXPECT_EQ(qk_norms, 2 * per_layer);
        EXPECT_EQ(decayed_qk_norms, apply_wd ? qk_norms : 0);
        if (!qk) {
          // Without --qk-layernorm the flag changes nothing, as Megatron.
          const std::vector<ParamSpec> plain = build_param_specs(config_with(llama, false, false));
          ASSERT_EQ(plain.size(), specs.size());
          for (size_t i = 0; i < specs.size(); ++i) {
            EXPECT_EQ(plain[i].name, specs[i].name);
            EXPECT_EQ(plain[i].weight_decay, specs[i].weight_decay) << specs[i].name;
          }
        }
      }
    }
  }
}

}  // namespace
}  // namespace gpt
