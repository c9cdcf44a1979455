// resolve_defaults (train/args/arguments.h): every default that depends on other flags, filled in one
// step before validate_arguments checks the result. It runs on arguments that are not yet
// validated, so a default whose inputs are out of range (a zero head count, an overflowing size)
// is left unset, and validate_arguments reports what is wrong with the inputs.
#include <algorithm>
#include <optional>

#include "absl/strings/str_cat.h"
#include "core/checked_math.h"
#include "parallel/comm/torchrun_env.h"
#include "train/args/arguments.h"
#include "train/args/flag_enums.h"
#include "train/args/flag_table.h"

namespace gpt {
namespace {

using A = Arguments;

void add_note(Arguments& a, std::string note) {
  if (std::find(a.notes.begin(), a.notes.end(), note) == a.notes.end()) a.notes.push_back(std::move(note));
}

// --ffn-hidden-size: Megatron's int((4 * h * 2 / 3) / 64) * 64 with --swiglu (the gated MLP's
// parameters close to a 4h MLP's), which is floor(8h / 192) * 64 in integers; else 4h.
void resolve_model_shape(Arguments& a) {
  // A size given as 0 stays 0 for validation to refuse.
  if (a.ffn_hidden_size == 0 && !flag_given(a, &A::ffn_hidden_size) && a.hidden_size > 0) {
    const std::optional<int64_t> product = checked_multiply(a.swiglu ? 8 : 4, a.hidden_size);
    const int64_t ffn = !product ? 0 : a.swiglu ? *product / 192 * 64 : *product;
    if (ffn > 0) a.ffn_hidden_size = ffn;
  }
  if (a.kv_channels == 0 && !flag_given(a, &A::kv_channels) && a.num_attention_heads > 0 &&
      a.hidden_size % a.num_attention_heads == 0) {
    a.kv_channels = a.hidden_size / a.num_attention_heads;
  }
  // --no-position-embedding: Megatron's older spelling of "no learned position embedding".
  if (a.no_position_embedding &&
      parse_flag_enum<PositionEmbedding>(a.position_embedding_type) == PositionEmbedding::kLearnedAbsolute) {
    a.position_embedding_type = enum_name(PositionEmbedding::kNone);
  }
  // Without --group-query-attention every head has its own key and value head.
  if (!a.group_query_attention) a.num_query_groups = a.num_attention_heads;
}

}  // namespace

void resolve_defaults(Arguments& a) {
  // ZB-V is two model chunks per pipeline rank by definition (this program's schedule; Megatron
  // has none by that name): without a virtual-stage flag it gets two.
  if (pipeline_schedule_flag(a) == PipelineScheduleFlag::kZeroBubbleV && a.pipeline_model_parallel_size > 1 &&
      !flag_given(a, &A::num_layers_per_virtual_pipeline_stage) &&
      !flag_given(a, &A::num_virtual_stages_per_pipeline_rank)) {
    a.num_virtual_stages_per_pipeline_rank = 2;
    a.given.insert(std::string(flag_name(&A::num_virtual_stages_per_pipeline_rank)));
  }
  // GPT-2 BPE files without a tokenizer type: Megatron's GPT2BPETokenizer.
  if (a.tokenizer_type.empty() && !a.vocab_file.empty()) a.tokenizer_type = enum_name(TokenizerType::kGpt2Bpe);
  resolve_model_shape(a);
  // Megatron keeps the bias switches in sync: with linear biases linear_qkv has one too.
  if (!a.disable_bias_linear) a.add_qkv_bias = true;
  // Megatron's shorthand for --recompute-granularity selective (with full: refused by validation).
  if (a.recompute_activations &&
      parse_flag_enum<RecomputeGranularity>(a.recompute_granularity) != RecomputeGranularity::kFull) {
    a.recompute_granularity = enum_name(RecomputeGranularity::kSelective);
  }
  // The learning-rate schedule decays over the run unless told otherwise.
  if (flag_given(a, &A::train_samples)) {
    if (!flag_given(a, &A::lr_decay_samples)) a.lr_decay_samples = a.train_samples;
  } else if (a.lr_decay_iters == 0 && !flag_given(a, &A::lr_decay_iters)) {
    a.lr_decay_iters = a.train_iters;
  }
  // Megatron's flags whose value this program carries out otherwise, said once at start-up.
  if (flag_given(a, &A::ckpt_format) && parse_flag_enum<CheckpointFormat>(a.ckpt_format) != CheckpointFormat::kHdf5 &&
      (!a.save.empty() || !a.load.empty())) {
    add_note(a, absl::StrCat(flag_name(&A::ckpt_format), " ", a.ckpt_format,
                             ": checkpoints are written and read in this program's sharded HDF5 format (sharded "
                             "by tensor slice, loadable into any parallel layout, written asynchronously with ",
                             flag_name(&A::async_save), "; docs/CHECKPOINTS.md), not PyTorch files"));
  }
  if (parse_flag_enum<AttentionBackend>(a.attention_backend) == AttentionBackend::kFlash) {
    // Megatron's FlashAttention library computes exact attention; so does auto here, with cuDNN's
    // fused flash attention where it applies.
    add_note(a, absl::StrCat(flag_name(&A::attention_backend),
                             " flash: runs what auto does here (exact attention: cuDNN's fused flash attention on the "
                             "GPU where it applies, the reference kernel elsewhere)"));
  }
  if (a.distributed_backend == "gloo" && !launched_by_torchrun()) {
    // Megatron's CPU backend. Under torchrun it is the Gloo communicator; under mpirun and srun
    // the collectives on host memory are MPI's (Gloo's store and addresses come from torchrun), so
    // a Megatron CPU launch runs unchanged on them; said once, not silently.
    a.distributed_backend = "mpi";
    add_note(a,
             absl::StrCat(flag_name(&A::distributed_backend),
                          " gloo: started by mpirun or srun, the MPI communicator runs the same collectives (Gloo is the "
                          "communicator of torchrun launches)"));
  }
  // --expert-tensor-parallel-size other than TP: accepted as Megatron does for a dense model
  // (train/args/expert_arguments.h checks its grid against the world).
  if (a.num_experts <= 0 && flag_given(a, &A::expert_tensor_parallel_size) && a.expert_tensor_parallel_size >= 1 &&
      a.expert_tensor_parallel_size != a.tensor_model_parallel_size) {
    add_note(a, absl::StrCat(flag_name(&A::expert_tensor_parallel_size), " ", a.expert_tensor_parallel_size,
                             ": this model has no expert (MoE) layers, so no parameter uses the expert "
                             "groups (as in Megatron for a dense model); the layout is TP ",
                             a.tensor_model_parallel_size));
  }
}

}  // namespace gpt
