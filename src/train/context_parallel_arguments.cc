#include "train/context_parallel_arguments.h"

#include <algorithm>

#include "absl/strings/str_cat.h"

namespace gpt {
namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

// Context parallelism (--context-parallel-size, --cp-comm-type): what the split and the attention
// cores need, each refusal naming the flags.
absl::Status validate_context_parallel_arguments(const Arguments& a) {
  const int64_t cp = a.context_parallel_size, tp = a.tensor_model_parallel_size;
  if (cp < 1) return invalid(absl::StrCat("--context-parallel-size must be at least 1 (got ", cp, ")"));
  if (a.cp_comm_type.empty()) return invalid("--cp-comm-type needs a value: p2p or a2a");
  for (const std::string& type : a.cp_comm_type) {
    if (type == "allgather" || type == "a2a+p2p") {
      return invalid(absl::StrCat("--cp-comm-type ", type,
                                  " is not built in this program: use p2p (ring attention) or a2a (all-to-all over "
                                  "heads)"));
    }
    if (type != "p2p" && type != "a2a") {
      return invalid(absl::StrCat("--cp-comm-type must be p2p or a2a (got ", type, ")"));
    }
  }
  if (a.cp_comm_type.size() != 1 && static_cast<int64_t>(a.cp_comm_type.size()) != a.num_layers) {
    return invalid(absl::StrCat("--cp-comm-type takes one value for every layer or one per layer: ",
                                a.cp_comm_type.size(), " values for --num-layers ", a.num_layers));
  }
  if (cp == 1) return absl::OkStatus();
  if (a.seq_length % (2 * cp) != 0) {
    return invalid(absl::StrCat("--seq-length (", a.seq_length, ") must be divisible by 2 x --context-parallel-size (",
                                2 * cp, "): the load-balanced split cuts each sequence into 2 x CP chunks"));
  }
  if (a.sequence_parallel && tp > 1 && (a.seq_length / cp) % tp != 0) {
    return invalid(absl::StrCat("--seq-length / --context-parallel-size (", a.seq_length / cp,
                                ") must be divisible by --tensor-model-parallel-size (", tp,
                                ") with --sequence-parallel"));
  }
  const bool all_to_all =
      std::find(a.cp_comm_type.begin(), a.cp_comm_type.end(), "a2a") != a.cp_comm_type.end();
  const int64_t groups = a.group_query_attention ? a.num_query_groups : a.num_attention_heads;
  if (all_to_all && (groups % tp != 0 || (groups / tp) % cp != 0 || (a.num_attention_heads / tp) % cp != 0)) {
    return invalid(absl::StrCat("--cp-comm-type a2a needs the attention heads (", a.num_attention_heads,
                                ") and key/value groups (", groups,
                                ") of each tensor-parallel rank divisible by --context-parallel-size (", cp,
                                "): each context-parallel rank attends to 1 / CP of them"));
  }
  if (a.attention_backend == "fused" &&
      std::find(a.cp_comm_type.begin(), a.cp_comm_type.end(), "p2p") != a.cp_comm_type.end()) {
    return invalid("--cp-comm-type p2p runs each block with the exact attention kernels (this program's fused "
                   "attention has no per-block form yet): use --attention-backend auto or --cp-comm-type a2a");
  }
  return absl::OkStatus();
}


}  // namespace gpt
