#include "train/megatron_flags.h"

#include "absl/strings/str_cat.h"

namespace gpt {

namespace {

using enum FlagStatus;

// Sorted by status, then flag. An entry's note is what docs/MEGATRON_FLAGS.md shows.
constexpr MegatronFlagNote kNotes[] = {
    // Accepted implementation choices: their --help says what they mean here.
    {"--accumulate-allreduce-grads-in-fp32", kImplementation, ""},
    {"--apply-query-key-layer-scaling", kImplementation, ""},
    {"--async-save", kImplementation, "the writer is a background thread from a host copy (Megatron's uses processes)"},
    {"--attention-dropout", kImplementation,
     "Megatron's default and meaning; the masks are a function of (seed, iteration, layer, sample, element), "
     "the same in every layout, and so differ from Megatron's own"},
    {"--attention-softmax-in-fp32", kImplementation, ""},
    {"--deterministic-mode", kImplementation, ""},
    {"--empty-unused-memory-level", kImplementation, ""},
    {"--hidden-dropout", kImplementation,
     "Megatron's default and meaning; the masks are layout-independent (see --attention-dropout)"},
    {"--log-throughput", kImplementation,
     "Megatron's TFLOP/s field (its formula, attention term not halved), followed by a tokens/s/GPU field of "
     "this program's"},
    {"--manual-gc", kImplementation, ""},
    {"--manual-gc-interval", kImplementation, ""},
    {"--no-async-tensor-model-parallel-allreduce", kImplementation, ""},
    {"--no-bias-dropout-fusion", kImplementation, ""},
    {"--no-bias-swiglu-fusion", kImplementation, ""},
    {"--no-check-for-nan-in-loss-and-grad", kImplementation,
     "without the check a non-finite gradient norm skips that iteration's update on every rank (Megatron "
     "skips only under FP16 loss scaling) and is counted as skipped; a non-finite loss as a nan iteration"},
    {"--no-create-attention-mask-in-dataloader", kImplementation, ""},
    {"--no-gradient-accumulation-fusion", kImplementation, ""},
    {"--no-masked-softmax-fusion", kImplementation, ""},
    {"--no-mmap-bin-files", kImplementation, ""},
    {"--no-persist-layer-norm", kImplementation, ""},
    {"--no-rope-fusion", kImplementation, ""},
    {"--tensorboard-queue-size", kImplementation, ""},
    {"--use-cpu-initialization", kImplementation, ""},
    {"--use-mcore-models", kImplementation, ""},
    {"--use-persistent-ckpt-worker", kImplementation, ""},
    // Accepted, with values refused where they ask for what this program cannot do.
    {"--attention-backend", kRefusedAtValues,
     "auto, fused, local and unfused; flash is refused (cuDNN's fused flash attention is what auto and fused run)"},
    {"--ckpt-format", kRefusedAtValues,
     "hdf5 only (this program's sharded format; docs/CHECKPOINTS.md); torch_dist, torch and zarr are refused"},
    {"--disable-bias-linear", kRefusedAtValues,
     "refused without --swiglu: a bias-free GeLU MLP in Megatron uses the exact erf GeLU, which this program "
     "does not have"},
    {"--distributed-backend", kRefusedAtValues,
     "nccl (needs a GPU) and mpi; gloo runs on the MPI communicator, said in one note at start-up"},
    {"--lr-decay-style", kRefusedAtValues, "constant, linear and cosine; inverse-square-root and WSD are refused"},
    {"--no-bias-gelu-fusion", kRefusedAtValues,
     "refused with a GeLU MLP (unfused Megatron computes the exact erf GeLU, this program only the fused tanh "
     "approximation); accepted with --swiglu, where it has no effect"},
    {"--position-embedding-type", kRefusedAtValues, "learned_absolute, rope and none; relative, mrope and yarn are refused"},
    {"--tokenizer-type", kRefusedAtValues, "GPT2BPETokenizer and NullTokenizer; other tokenizers are refused"},
    {"--transformer-impl", kRefusedAtValues,
     "local and transformer_engine both run this program's kernels; inference_optimized is refused"},
    {"--use-flash-attn", kRefusedAtValues, "refused with --attention-backend local or unfused"},
    // Refused.
    {"--fp16", kRefused, "this program has no FP16 mixed precision (loss scaling): use --bf16, or neither for FP32"},
    {"--rampup-batch-size", kRefused, "the global batch size is constant in this program"},
    {"--context-parallel-size", kRefused, "this program has no context parallelism (it has TP, SP, PP with interleaving and DP)",
     false},
    {"--expert-model-parallel-size", kRefused, "this program has no mixture-of-experts models", false},
    {"--fp8-format", kRefused, "this program has no FP8 training: use --bf16", false},
    {"--num-experts", kRefused, "this program has no mixture-of-experts models", false},
    {"--use-legacy-models", kRefused, "the model is Megatron-Core's GPT; this program has no legacy model", false},
    {"--wandb-project", kRefused, "this program has no Weights & Biases logging; --metrics-file writes JSON lines",
     false},
    // This program's own.
    {"--allow-other-run-checkpoints", kOwn, ""},
    {"--device", kOwn, ""},
    {"--keep-latest-checkpoints", kOwn, ""},
    {"--load-fallback-to-previous", kOwn, ""},
    {"--metrics-file", kOwn, ""},
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

std::span<const MegatronFlagNote> megatron_flag_notes() { return kNotes; }

const MegatronFlagNote* find_megatron_flag_note(std::string_view flag) {
  for (const MegatronFlagNote& note : kNotes) {
    if (note.flag == flag) return &note;
  }
  return nullptr;
}

std::optional<std::string> undeclared_refused_flag(std::span<const std::string> argv) {
  for (const std::string& token : argv) {
    if (!token.starts_with("--")) continue;
    const std::string_view flag = std::string_view(token).substr(0, token.find('='));
    const MegatronFlagNote* note = find_megatron_flag_note(flag);
    if (note != nullptr && note->status == kRefused && !note->declared) {
      return absl::StrCat(std::string(flag), " (a Megatron-LM flag) is not supported: ", std::string(note->note));
    }
  }
  return std::nullopt;
}

}  // namespace gpt
