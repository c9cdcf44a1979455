#include "train/args/megatron_flags.h"

#include "absl/strings/str_cat.h"

namespace gpt {

namespace {

using enum FlagStatus;

// The reasons several MoE flags share.
constexpr std::string_view kNoExpertParallel =
    "each expert's weights are split over --expert-tensor-parallel-size ranks as whole slices; sharding them "
    "further into weight shards is not built";
constexpr std::string_view kNoFlex =
    "this program has no flex token dispatcher (DeepEP / HybridEP / NCCL EP): its expert-parallel dispatchers are "
    "allgather and alltoall";
constexpr std::string_view kNoOverlap =
    "the expert-parallel exchanges run inside each MoE layer's own forward and backward (not overlapped with "
    "another microbatch's compute as Megatron's combined 1F1B schedule does), and no weight gradients are delayed "
    "to overlap them";
constexpr std::string_view kGluHalves =
    "the experts' linear_fc1 holds the GLU halves as [gate; up] (Megatron's default layout); an interleaved layout "
    "is not built";
constexpr std::string_view kNoPagedStash = "this program has no paged MoE activation stash";
constexpr std::string_view kNoForcedRouting = "this program has no forced (benchmark) routing: the router's top-k decides";
constexpr std::string_view kNoMoeFp8 = "FP8 with MoE layers is refused in this program (the experts' GEMMs run in the "
                                       "model's dtype)";
constexpr std::string_view kNoRoutingTrace = "this program writes no routing traces";
constexpr std::string_view kPerExpertWeights =
    "each expert has its own weight{e} / bias{e} here (Megatron's default layout); one grouped tensor is not built";
constexpr std::string_view kNoUpcycling = "this program has no upcycling of a dense checkpoint into experts";

// Megatron flags refused before parsing, with the reason (docs/MEGATRON_FLAGS.md shows it).
constexpr RefusedMegatronFlag kUndeclaredRefused[] = {
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
    // Issue 40: the mixture-of-experts family's flags this program has not built (the built ones are
    // rows of train/args/flag_rows_moe.cc; values refused there are in train/args/moe_arguments.cc).
    {"--delay-wgrad-compute", kNoOverlap},
    {"--expert-tensor-parallel-num-weight-shards", kNoExpertParallel},
    {"--gtp-expert-remat-nccl-ub", "this program registers no NCCL user buffers: its collectives use the arena's memory"},
    {"--inference-moe-disable-fused-quant-kernels", "this program has no MoE inference engine (fused quantized kernels)"},
    {"--inference-moe-token-dispatcher-type", "this program has no MoE inference engine (NCCL / NVLS dispatch)"},
    {"--moe-apply-probs-on-input", "the routing weights multiply the experts' outputs here (Megatron's default); "
     "weighting the experts' inputs is not built"},
    {"--moe-combine-bwd-dtype", kNoFlex},
    {"--moe-deepep-num-sms", kNoFlex},
    {"--moe-dispatch-fwd-dtype", kNoFlex},
    {"--moe-enable-deepep", kNoFlex},
    {"--moe-enable-routing-replay", "this program has no routing replay (recorded router choices replayed)"},
    {"--moe-expert-rank-capacity-factor", kNoFlex},
    {"--moe-flex-dispatcher-backend", kNoFlex},
    {"--moe-extended-tp", "an older Megatron's expert tensor parallelism (core_r0.9 to core_v0.15): the experts here "
     "split over --expert-tensor-parallel-size, which must equal --tensor-model-parallel-size"},
    {"--moe-flex-dispatcher-num-sms", kNoFlex},
    {"--moe-hybridep-num-blocks-permute", kNoFlex},
    {"--moe-hybridep-num-blocks-unpermute", kNoFlex},
    {"--moe-hybridep-num-sms", kNoFlex},
    {"--moe-hybridep-num-sms-preprocessing", kNoFlex},
    {"--moe-hybridep-pad-uneven-dispatch-inputs", kNoFlex},
    {"--moe-input-jitter-eps", "this program has no router input jitter (no Megatron test configuration uses it)"},
    {"--moe-latent-size", "this program has no latent MoE (the experts run at the hidden size)"},
    {"--moe-layer-recompute", "this program does not recompute MoE layers (selective recompute is attention's core; "
     "full recompute is refused with MoE)"},
    {"--moe-mlp-glu-interleave-size", kGluHalves},
    {"--moe-ncclep-zero-copy", kNoFlex},
    {"--moe-pad-experts-for-cuda-graph-inference", "this program has no CUDA-graph inference"},
    {"--moe-paged-stash", kNoPagedStash},
    {"--moe-paged-stash-buffer-size-factor-cpu", kNoPagedStash},
    {"--moe-paged-stash-buffer-size-factor-cuda", kNoPagedStash},
    {"--moe-paged-stash-page-size", kNoPagedStash},
    {"--moe-permute-fusion-into-hybridep", kNoFlex},
    {"--moe-router-force-biased", kNoForcedRouting},
    {"--moe-router-force-load-balancing", kNoForcedRouting},
    {"--moe-router-padding-for-fp8", kNoMoeFp8},
    {"--moe-router-padding-for-quantization", kNoMoeFp8},
    {"--moe-router-quantile-balancing-ema", "this program has no quantile balancing "
     "(--moe-router-load-balancing-type quantile_balancing is refused)"},
    {"--moe-routing-trace-capture-hidden-states", kNoRoutingTrace},
    {"--moe-routing-trace-capture-logits", kNoRoutingTrace},
    {"--moe-routing-trace-dump-weights", kNoRoutingTrace},
    {"--moe-routing-trace-max-training-iters", kNoRoutingTrace},
    {"--moe-routing-trace-path", kNoRoutingTrace},
    {"--moe-shared-expert-gate", "this program has no gate on the shared expert (its output is added ungated)"},
    {"--moe-shared-expert-glu-interleave-size", kGluHalves},
    {"--moe-single-grouped-bias", kPerExpertWeights},
    {"--moe-single-grouped-weight", kPerExpertWeights},
    {"--moe-upcycling-granularity", kNoUpcycling},
    {"--moe-use-grouped-tensor", kPerExpertWeights},
    {"--moe-use-legacy-grouped-gemm", "an older Megatron's GroupedGEMM implementation (core_v0.12 to core_v0.15); the "
     "experts here always run as one grouped GEMM over their row ranges (--moe-grouped-gemm is accepted)"},
    {"--moe-use-upcycling", kNoUpcycling},
    {"--overlap-dispatch-backward-with-experts-wgrad", kNoOverlap},
    {"--overlap-moe-expert-parallel-comm", kNoOverlap},
    {"--rl-inference-expert-model-parallel-size", "this program has no RL inference engine"},
    {"--rl-inference-expert-tensor-model-parallel-size", "this program has no RL inference engine"},
    {"--save-tokens-per-expert-interval", "this program does not save the per-expert token counts (the log line has "
     "the load-balancing losses)"},
    {"--use-grouped-gemm-for-shared-expert", "the shared expert runs as a dense MLP here (the same numbers as "
     "Megatron's default); a grouped GEMM for it is not built"},
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
