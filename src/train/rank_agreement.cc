#include "train/rank_agreement.h"

#include <mpi.h>

#include <cstdint>
#include <map>
#include <sstream>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "core/philox.h"

namespace gpt {
namespace {

constexpr char kPeerFailure[] = "gpt/peer-failure";

int world_rank() {
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  return rank;
}

int world_size() {
  int size = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  return size;
}

int all_min(int value, const char* what) {
  GPT_CHECK_EQ(MPI_Allreduce(MPI_IN_PLACE, &value, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD), MPI_SUCCESS) << what;
  return value;
}

std::string format(int64_t value) { return absl::StrCat(value); }
// Every digit that matters: 1e-3 and 0.001 agree, 1e-3 and 1.0000001e-3 do not.
std::string format(double value) { return absl::StrFormat("%.17g", value); }
std::string format(bool value) { return value ? "true" : "false"; }
std::string format(const std::string& value) { return absl::StrCat("'", value, "'"); }
std::string format(const std::vector<std::string>& values) {
  std::vector<std::string> quoted;
  for (const std::string& v : values) quoted.push_back(format(v));
  return absl::StrJoin(quoted, " ");
}

}  // namespace

int job_world_size() { return mpi_running() ? world_size() : 1; }

// MPI is running when a launcher started this process (MpiRuntime initialized it) and it has not
// been shut down; without it the process is a world of one.
bool mpi_running() {
  int initialized = 0, finalized = 0;
  MPI_Initialized(&initialized);
  MPI_Finalized(&finalized);
  return initialized != 0 && finalized == 0;
}

absl::Status agree_on_setup(const absl::Status& local, absl::string_view phase) {
  if (!mpi_running()) return local;
  const int rank = world_rank(), size = world_size();
  const bool failed = !local.ok() && !is_peer_failure(local);
  const int first_failure = all_min(failed ? rank : size, "MPI_Allreduce of the set-up status");
  if (first_failure == size) return local;  // OK everywhere (a peer failure was agreed earlier)
  if (!local.ok()) return local;
  absl::Status peer = absl::AbortedError(
      absl::StrCat(phase, " failed on rank ", first_failure, " (its message is printed by that rank)"));
  peer.SetPayload(kPeerFailure, absl::Cord("1"));
  return peer;
}

bool is_peer_failure(const absl::Status& status) { return status.GetPayload(kPeerFailure).has_value(); }

std::string canonical_arguments(const Arguments& a) {
  // Every field of Arguments except `given` (which flags were spelled out does not change the run
  // when the values agree). A field added to Arguments belongs here too.
  std::ostringstream out;
  auto line = [&](const char* flag, const auto& value) { out << flag << " " << format(value) << "\n"; };
  line("--num-layers", a.num_layers);
  line("--hidden-size", a.hidden_size);
  line("--ffn-hidden-size", a.ffn_hidden_size);
  line("--num-attention-heads", a.num_attention_heads);
  line("--kv-channels", a.kv_channels);
  line("--seq-length", a.seq_length);
  line("--max-position-embeddings", a.max_position_embeddings);
  line("--make-vocab-size-divisible-by", a.make_vocab_size_divisible_by);
  line("--untie-embeddings-and-output-weights", a.untie_embeddings_and_output_weights);
  line("--init-method-std", a.init_method_std);
  line("--norm-epsilon", a.norm_epsilon);
  line("--hidden-dropout", a.hidden_dropout);
  line("--attention-dropout", a.attention_dropout);
  line("--position-embedding-type", a.position_embedding_type);
  line("--normalization", a.normalization);
  line("--no-position-embedding", a.no_position_embedding);
  line("--rotary-percent", a.rotary_percent);
  line("--rotary-base", a.rotary_base);
  line("--swiglu", a.swiglu);
  line("--group-query-attention", a.group_query_attention);
  line("--num-query-groups", a.num_query_groups);
  line("--disable-bias-linear", a.disable_bias_linear);
  line("--tensor-model-parallel-size", a.tensor_model_parallel_size);
  line("--pipeline-model-parallel-size", a.pipeline_model_parallel_size);
  line("--num-layers-per-virtual-pipeline-stage", a.num_layers_per_virtual_pipeline_stage);
  line("--num-virtual-stages-per-pipeline-rank", a.num_virtual_stages_per_pipeline_rank);
  line("--sequence-parallel", a.sequence_parallel);
  line("--use-distributed-optimizer", a.use_distributed_optimizer);
  line("--overlap-grad-reduce", a.overlap_grad_reduce);
  line("--overlap-param-gather", a.overlap_param_gather);
  line("--ddp-bucket-size", a.ddp_bucket_size);
  line("--distributed-backend", a.distributed_backend);
  line("--distributed-timeout-minutes", a.distributed_timeout_minutes);
  line("--micro-batch-size", a.micro_batch_size);
  line("--global-batch-size", a.global_batch_size);
  line("--train-iters", a.train_iters);
  line("--train-samples", a.train_samples);
  line("--lr-decay-samples", a.lr_decay_samples);
  line("--lr-warmup-samples", a.lr_warmup_samples);
  line("--lr", a.lr);
  line("--min-lr", a.min_lr);
  line("--lr-decay-style", a.lr_decay_style);
  line("--lr-decay-iters", a.lr_decay_iters);
  line("--lr-warmup-iters", a.lr_warmup_iters);
  line("--lr-warmup-fraction", a.lr_warmup_fraction);
  line("--weight-decay", a.weight_decay);
  line("--clip-grad", a.clip_grad);
  line("--adam-beta1", a.adam_beta1);
  line("--adam-beta2", a.adam_beta2);
  line("--adam-eps", a.adam_eps);
  line("--bf16", a.bf16);
  line("--fp16", a.fp16);
  line("--seed", a.seed);
  line("--deterministic-mode", a.deterministic_mode);
  line("--attention-backend", a.attention_backend);
  line("--recompute-granularity", a.recompute_granularity);
  line("--recompute-method", a.recompute_method);
  line("--recompute-num-layers", a.recompute_num_layers);
  line("--recompute-activations", a.recompute_activations);
  line("--mock-data", a.mock_data);
  line("--vocab-size", a.vocab_size);
  line("--data-path", a.data_path);
  line("--split", a.split);
  line("--vocab-file", a.vocab_file);
  line("--merge-file", a.merge_file);
  line("--tokenizer-type", a.tokenizer_type);
  line("--data-cache-path", a.data_cache_path);
  line("--device", a.device);
  line("--eval-interval", a.eval_interval);
  line("--eval-iters", a.eval_iters);
  line("--log-interval", a.log_interval);
  line("--log-throughput", a.log_throughput);
  line("--log-params-norm", a.log_params_norm);
  line("--log-num-zeros-in-grad", a.log_num_zeros_in_grad);
  line("--timing-log-level", a.timing_log_level);
  line("--metrics-file", a.metrics_file);
  line("--save", a.save);
  line("--save-interval", a.save_interval);
  line("--load", a.load);
  line("--ckpt-step", a.ckpt_step);
  line("--no-load-optim", a.no_load_optim);
  line("--no-load-rng", a.no_load_rng);
  line("--no-save-optim", a.no_save_optim);
  line("--finetune", a.finetune);
  line("--ckpt-format", a.ckpt_format);
  line("--async-save", a.async_save);
  line("--use-persistent-ckpt-worker", a.use_persistent_ckpt_worker);
  line("--dist-ckpt-strictness", a.dist_ckpt_strictness);
  line("--exit-signal-handler", a.exit_signal_handler);
  line("--exit-duration-in-mins", a.exit_duration_in_mins);
  line("--exit-interval", a.exit_interval);
  line("--keep-latest-checkpoints", a.keep_latest_checkpoints);
  line("--load-fallback-to-previous", a.load_fallback_to_previous);
  return out.str();
}

std::vector<std::string> differing_arguments(const std::string& mine, const std::string& reference) {
  auto by_flag = [](const std::string& text) {
    std::map<std::string, std::string> values;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      const std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(' ', 1));
      values[kv.first] = kv.second;
    }
    return values;
  };
  const std::map<std::string, std::string> ours = by_flag(mine), theirs = by_flag(reference);
  std::vector<std::string> differences;
  for (const auto& [flag, value] : ours) {
    const auto other = theirs.find(flag);
    const std::string reference_value = other == theirs.end() ? "(none)" : other->second;
    if (reference_value != value) differences.push_back(absl::StrCat(flag, " ", value, " (rank 0: ", reference_value, ")"));
  }
  for (const auto& [flag, value] : theirs) {
    if (ours.count(flag) == 0) differences.push_back(absl::StrCat(flag, " (none) (rank 0: ", value, ")"));
  }
  return differences;
}

absl::Status check_same_arguments(const Arguments& args) {
  if (!mpi_running()) return absl::OkStatus();
  const int rank = world_rank(), size = world_size();
  std::string text = canonical_arguments(args);
  const uint64_t digest = fnv1a_64(text);
  std::vector<uint64_t> digests(static_cast<size_t>(size));
  GPT_CHECK_EQ(MPI_Allgather(&digest, 1, MPI_UINT64_T, digests.data(), 1, MPI_UINT64_T, MPI_COMM_WORLD), MPI_SUCCESS)
      << "MPI_Allgather of the argument digests";
  std::vector<int> differing;
  for (int r = 1; r < size; ++r) {
    if (digests[static_cast<size_t>(r)] != digests[0]) differing.push_back(r);
  }
  if (differing.empty()) return absl::OkStatus();
  // Every rank knows that some differ: rank 0's text goes to all, and each differing rank names
  // its own differences (the launcher prints the lowest one's).
  uint64_t length = text.size();
  GPT_CHECK_EQ(MPI_Bcast(&length, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD), MPI_SUCCESS) << "MPI_Bcast of rank 0's arguments";
  std::string reference = rank == 0 ? text : std::string(length, '\0');
  GPT_CHECK_EQ(MPI_Bcast(reference.data(), static_cast<int>(length), MPI_CHAR, 0, MPI_COMM_WORLD), MPI_SUCCESS)
      << "MPI_Bcast of rank 0's arguments";
  if (digests[static_cast<size_t>(rank)] == digests[0]) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "given different arguments from rank 0: ", absl::StrJoin(differing_arguments(text, reference), ", "),
      " (ranks that differ from rank 0: ", absl::StrJoin(differing, ", "), " of ", size,
      "; every rank must be given the same arguments)"));
}

}  // namespace gpt
