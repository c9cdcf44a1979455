#include "train/megatron_flags.h"

#include "absl/strings/str_cat.h"

namespace gpt {

namespace {

using enum FlagStatus;

// Megatron flags refused before parsing, with the reason (docs/MEGATRON_FLAGS.md shows it).
constexpr RefusedMegatronFlag kUndeclaredRefused[] = {
    {"--expert-model-parallel-size", "this program has no mixture-of-experts models"},
    {"--hierarchical-context-parallel-sizes",
     "only used by --cp-comm-type a2a+p2p, which this program does not build (p2p and a2a are built)"},
    {"--num-experts", "this program has no mixture-of-experts models"},
    {"--num-distributed-optimizer-instances",
     "this program has no hybrid sharding (HSDP): the optimizer state is sharded over the whole data-parallel group"},
    {"--outer-dp-sharding-strategy",
     "this program has no hybrid sharding (HSDP): --use-megatron-fsdp shards over the whole data-parallel group"},
    {"--overlap-cpu-optimizer-d2h-h2d",
     "with --optimizer-cpu-offload the copies and the host step run one after another; pipelining them per bucket "
     "on their own stream is not built yet"},
    {"--use-legacy-models", "the model is Megatron-Core's GPT; this program has no legacy model"},
    {"--use-nccl-ub", "this program registers no NCCL user buffers: its collectives use the arena's memory"},
    {"--use-torch-fsdp2", "this program's FSDP is --use-megatron-fsdp (ZeRO levels inside the TP x PP x DP grid)"},
    {"--wandb-project", "this program has no Weights & Biases logging; --metrics-file writes JSON lines"},
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
