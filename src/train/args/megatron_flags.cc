#include "train/args/megatron_flags.h"

#include "absl/strings/str_cat.h"

namespace gpt {

namespace {

using enum FlagStatus;

// Megatron flags refused before parsing, with the reason (docs/MEGATRON_FLAGS.md shows it).
constexpr RefusedMegatronFlag kUndeclaredRefused[] = {
    {"--expert-model-parallel-size", "this program has no mixture-of-experts models"},
    {"--outer-dp-sharding-strategy",
     "this program has no hybrid sharding (HSDP): --use-megatron-fsdp shards over the whole data-parallel group"},
    {"--use-legacy-models", "the model is Megatron-Core's GPT; this program has no legacy model"},
    {"--use-nccl-ub", "this program registers no NCCL user buffers: its collectives use the arena's memory"},
    {"--wandb-project", "this program has no Weights & Biases logging; --metrics-file writes JSON lines"},
    // Issue 32: the other families Megatron's GPT test configurations use.
    {"--attention-output-gate", "this program has no gated attention output (Qwen3-Next style)"},
    {"--experimental-attention-variant", "this program has no linear or gated-delta attention layers; every layer is softmax attention"},
    {"--export-kd-cfg", "this program has no knowledge-distillation export (ModelOpt)"},
    {"--export-kd-teacher-load", "this program has no knowledge-distillation export (ModelOpt)"},
    {"--export-te-mcore-model", "this program has no ModelOpt export; ckpt_tool export writes safetensors"},
    {"--fim-data", "this program has no fill-in-the-middle data transformation"},
    {"--fim-rate", "this program has no fill-in-the-middle data transformation"},
    {"--fim-spm-rate", "this program has no fill-in-the-middle data transformation"},
    {"--fp8-param-gather", "FP8 here is the linears' GEMM operands (--fp8-format); parameters and their gathers stay in the model's dtype"},
    {"--kv-lora-rank", "this program has no multi-latent attention (DeepSeek's MLA); its attention is multi-head or grouped-query"},
    {"--linear-attention-freq", "this program has no linear or gated-delta attention layers; every layer is softmax attention"},
    {"--linear-conv-kernel-dim", "this program has no linear or gated-delta attention layers; every layer is softmax attention"},
    {"--linear-key-head-dim", "this program has no linear or gated-delta attention layers; every layer is softmax attention"},
    {"--linear-num-key-heads", "this program has no linear or gated-delta attention layers; every layer is softmax attention"},
    {"--linear-num-value-heads", "this program has no linear or gated-delta attention layers; every layer is softmax attention"},
    {"--linear-value-head-dim", "this program has no linear or gated-delta attention layers; every layer is softmax attention"},
    {"--moe-shared-expert-gate", "this program has no mixture-of-experts models"},
    {"--multi-latent-attention", "this program has no multi-latent attention (DeepSeek's MLA); its attention is multi-head or grouped-query"},
    {"--mup-base-hidden-size", "this program has no muP parametrization (its initialization and learning rate are Megatron's standard ones)"},
    {"--q-lora-rank", "this program has no multi-latent attention (DeepSeek's MLA); its attention is multi-head or grouped-query"},
    {"--qk-head-dim", "this program has no multi-latent attention (DeepSeek's MLA); its attention is multi-head or grouped-query"},
    {"--qk-pos-emb-head-dim", "this program has no multi-latent attention (DeepSeek's MLA); its attention is multi-head or grouped-query"},
    {"--tp-comm-overlap", "this program does not overlap tensor-parallel communication with GEMMs (Transformer Engine's userbuffers)"},
    {"--tp-comm-overlap-cfg", "this program does not overlap tensor-parallel communication with GEMMs (Transformer Engine's userbuffers)"},
    {"--use-mup", "this program has no muP parametrization (its initialization and learning rate are Megatron's standard ones)"},
    {"--v-head-dim", "this program has no multi-latent attention (DeepSeek's MLA); its attention is multi-head or grouped-query"},
    {"--wandb-entity", "this program has no Weights & Biases logging; --metrics-file writes JSON lines"},
    {"--wandb-exp-name", "this program has no Weights & Biases logging; --metrics-file writes JSON lines"},
    {"--wandb-save-dir", "this program has no Weights & Biases logging; --metrics-file writes JSON lines"},
};

}  // namespace

std::string_view flag_status_name(FlagStatus status) {
  switch (status) {
    case kSame: return "same";
    case kImplementation: return "implementation";
    case kRefusedAtValues: return "refused at some values";
    case kRefused: return "refused";
    case kOwn: return "own";
  }
  return "?";
}

std::span<const RefusedMegatronFlag> undeclared_refused_megatron_flags() { return kUndeclaredRefused; }

std::optional<std::string> undeclared_refused_flag(std::span<const std::string> argv) {
  for (const std::string& token : argv) {
    if (!token.starts_with("--")) continue;
    const std::string_view flag = std::string_view(token).substr(0, token.find('='));
    for (const RefusedMegatronFlag& refused : kUndeclaredRefused) {
      if (refused.flag == flag) {
        return absl::StrCat(std::string(flag), " (a Megatron-LM flag) is not supported: ", std::string(refused.reason));
      }
    }
  }
  return std::nullopt;
}

}  // namespace gpt
