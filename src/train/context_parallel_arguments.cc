#include "train/context_parallel_arguments.h"

#include <algorithm>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "train/flag_enums.h"
#include "train/flag_table.h"

namespace gpt {

using A = Arguments;  // rows are named by field: flag_name(&A::save_interval)

namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

bool has_type(const Arguments& a, ContextCommType type) { return uses_cp_comm_type(a, type); }

}  // namespace

absl::StatusOr<std::vector<int64_t>> hierarchical_context_parallel_sizes(const Arguments& a) {
  std::vector<int64_t> sizes;
  for (const std::string& value : a.hierarchical_context_parallel_sizes) {
    for (absl::string_view token : absl::StrSplit(value, absl::ByAnyChar(" ,[]"), absl::SkipEmpty())) {
      int64_t size = 0;
      if (!absl::SimpleAtoi(token, &size) || size < 1) {
        return invalid(absl::StrCat(flag_name(&A::hierarchical_context_parallel_sizes),
                                    " takes positive integers (got '", value, "')"));
      }
      sizes.push_back(size);
    }
  }
  if (!a.hierarchical_context_parallel_sizes.empty() && sizes.empty()) {
    return invalid(absl::StrCat(flag_name(&A::hierarchical_context_parallel_sizes), " needs at least one size"));
  }
  return sizes;
}

int64_t context_inner_size(const Arguments& a) {
  const absl::StatusOr<std::vector<int64_t>> sizes = hierarchical_context_parallel_sizes(a);
  if (!sizes.ok() || sizes->size() != 2 || a.context_parallel_size == 1) return 0;
  return sizes->front();
}

bool uses_all_to_all_ring(const Arguments& a) { return has_type(a, ContextCommType::kAllToAllRing); }

// Context parallelism (--context-parallel-size, --cp-comm-type): what the split and the attention
// cores need, each refusal naming the flags.
absl::Status validate_context_parallel_arguments(const Arguments& a) {
  const int64_t cp = a.context_parallel_size, tp = a.tensor_model_parallel_size;
  if (cp < 1) return invalid(absl::StrCat(flag_name(&A::context_parallel_size), " must be at least 1 (got ", cp, ")"));
  if (a.cp_comm_type.empty()) return invalid(absl::StrCat(flag_name(&A::cp_comm_type), " needs a value: p2p or a2a"));
  for (const std::string& type : a.cp_comm_type) {
    if (type == "allgather") {
      return invalid(absl::StrCat(flag_name(&A::cp_comm_type),
                                  " allgather is not built in this program: use p2p (ring attention), a2a "
                                  "(all-to-all over heads) or a2a+p2p"));
    }
    if (!parse_flag_enum<ContextCommType>(type)) {
      return invalid(absl::StrCat(flag_name(&A::cp_comm_type), " must be ",
                                  names_for_message(flag_enum_names<ContextCommType>()), " (got ", type, ")"));
    }
  }
  // Megatron (arguments.py): the sizes multiply to CP, and a2a+p2p needs them.
  const absl::StatusOr<std::vector<int64_t>> sizes = hierarchical_context_parallel_sizes(a);
  if (!sizes.ok()) return sizes.status();
  if (!sizes->empty()) {
    int64_t product = 1;
    for (int64_t size : *sizes) product *= size;
    if (product != cp) {
      return invalid(absl::StrCat(flag_name(&A::hierarchical_context_parallel_sizes), " (",
                                  absl::StrJoin(*sizes, " x "), " = ", product, ") must multiply to ",
                                  flag_name(&A::context_parallel_size), " (", cp, ")"));
    }
    if (sizes->size() != 2) {
      return invalid(absl::StrCat(flag_name(&A::hierarchical_context_parallel_sizes),
                                  " takes two levels (the all-to-all's and the "
                                  "ring's, as ",
                                  flag_name(&A::cp_comm_type), " a2a+p2p uses them), got ", sizes->size()));
    }
  }
  const bool two_level = has_type(a, ContextCommType::kAllToAllRing);
  if (two_level && sizes->empty()) {
    return invalid(absl::StrCat(flag_name(&A::cp_comm_type), " a2a+p2p needs ",
                                flag_name(&A::hierarchical_context_parallel_sizes),
                                " (its all-to-all and ring "
                                "levels)"));
  }
  if (a.cp_comm_type.size() != 1 && static_cast<int64_t>(a.cp_comm_type.size()) != a.num_layers) {
    return invalid(absl::StrCat(flag_name(&A::cp_comm_type), " takes one value for every layer or one per layer: ",
                                a.cp_comm_type.size(), " values for ", flag_name(&A::num_layers), " ", a.num_layers));
  }
  if (cp == 1) return absl::OkStatus();
  if (a.seq_length % (2 * cp) != 0) {
    return invalid(absl::StrCat(flag_name(&A::seq_length), " (", a.seq_length, ") must be divisible by 2 x ",
                                flag_name(&A::context_parallel_size), " (", 2 * cp,
                                "): the load-balanced split cuts each sequence into 2 x CP chunks"));
  }
  if (a.sequence_parallel && tp > 1 && (a.seq_length / cp) % tp != 0) {
    return invalid(absl::StrCat(flag_name(&A::seq_length), " / ", flag_name(&A::context_parallel_size), " (",
                                a.seq_length / cp, ") must be divisible by ", flag_name(&A::tensor_model_parallel_size),
                                " (", tp, ") with ", flag_name(&A::sequence_parallel)));
  }
  const bool all_to_all = has_type(a, ContextCommType::kAllToAll);
  const int64_t groups = a.group_query_attention ? a.num_query_groups : a.num_attention_heads;
  if (two_level) {
    const int64_t inner = sizes->front();
    if (groups % tp != 0 || (groups / tp) % inner != 0 || (a.num_attention_heads / tp) % inner != 0) {
      return invalid(absl::StrCat(flag_name(&A::cp_comm_type), " a2a+p2p needs the attention heads (",
                                  a.num_attention_heads, ") and key/value groups (", groups,
                                  ") of each tensor-parallel rank divisible by the first of ",
                                  flag_name(&A::hierarchical_context_parallel_sizes), " (", inner,
                                  "): each rank of an all-to-all group attends to 1 / ", inner, " of them"));
    }
  }
  if (all_to_all && (groups % tp != 0 || (groups / tp) % cp != 0 || (a.num_attention_heads / tp) % cp != 0)) {
    return invalid(absl::StrCat(flag_name(&A::cp_comm_type), " a2a needs the attention heads (", a.num_attention_heads,
                                ") and key/value groups (", groups, ") of each tensor-parallel rank divisible by ",
                                flag_name(&A::context_parallel_size), " (", cp,
                                "): each context-parallel rank attends to 1 / CP of them"));
  }
  if (attention_backend(a) == AttentionBackend::kFused && (has_type(a, ContextCommType::kRing) || two_level)) {
    const ContextCommType ring = has_type(a, ContextCommType::kRing) ? ContextCommType::kRing
                                                                     : ContextCommType::kAllToAllRing;
    return invalid(absl::StrCat(flag_name(&A::cp_comm_type), " ", std::string(enum_name(ring)),
                                " runs each ring block with the exact attention kernels (this program's fused "
                                "attention has no per-block form yet): use ",
                                flag_name(&A::attention_backend), " auto or ", flag_name(&A::cp_comm_type), " a2a"));
  }
  return absl::OkStatus();
}


}  // namespace gpt
