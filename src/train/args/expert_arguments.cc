#include "train/args/expert_arguments.h"

#include "absl/strings/str_cat.h"
#include "core/checked_math.h"
#include "train/args/flag_table.h"

namespace gpt {

using A = Arguments;  // rows are named by field: flag_name(&A::save_interval)

absl::Status check_expert_groups(const Arguments& a, int64_t world_size, int64_t dp) {
  const bool etp_given = flag_given(a, &A::expert_tensor_parallel_size);
  const int64_t ep = a.expert_model_parallel_size;
  if (!etp_given && ep == 1 && a.num_experts <= 0) return absl::OkStatus();
  const int64_t etp = etp_given ? a.expert_tensor_parallel_size : a.tensor_model_parallel_size;
  if (etp < 1)
    return absl::InvalidArgumentError(
        absl::StrCat(flag_name(&A::expert_tensor_parallel_size), " must be at least 1 (got ", etp, ")"));
  // Megatron's parallel_state.initialize_model_parallel: "world_size is not divisible by
  // expert_tensor_model_pipeline_parallel size".
  const int64_t expert_model_pipeline =
      checked_multiply(checked_multiply(etp, ep).value_or(0), a.pipeline_model_parallel_size).value_or(0);
  if (expert_model_pipeline == 0 || world_size % expert_model_pipeline != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "world size (", world_size, ") must be divisible by ", flag_name(&A::expert_tensor_parallel_size), " (", etp,
        etp_given ? "" : ", from --tensor-model-parallel-size", ")",
        ep > 1 ? absl::StrCat(" x ", flag_name(&A::expert_model_parallel_size), " (", ep, ")") : "", " x ",
        flag_name(&A::pipeline_model_parallel_size), " (", a.pipeline_model_parallel_size,
        "), as Megatron's expert grid"));
  }
  // Its assertion for an order that is not pipeline-last ("When not using pp-last rank ordering, the
  // data parallel size of the attention and moe layers must be the same"). With it, the expert
  // grid's pipeline groups are the dense grid's (Megatron's next assertion) since then
  // ETP x EP = TP x CP.
  const int64_t expert_dp = world_size / expert_model_pipeline;
  if (a.use_tp_pp_dp_mapping && a.pipeline_model_parallel_size > 1 && expert_dp != dp) {
    return absl::InvalidArgumentError(absl::StrCat(
        flag_name(&A::expert_tensor_parallel_size), " ", etp,
        ep > 1 ? absl::StrCat(" x ", flag_name(&A::expert_model_parallel_size), " ", ep) : "", " with ",
        flag_name(&A::use_tp_pp_dp_mapping), " and ", flag_name(&A::pipeline_model_parallel_size), " ",
        a.pipeline_model_parallel_size, ": the expert data-parallel size (", expert_dp,
        ") must equal the data-parallel size (", dp, "), as Megatron requires without the pipeline-last rank order"));
  }
  return absl::OkStatus();
}

}  // namespace gpt
