#include "train/checkpoint_arguments.h"

#include "absl/strings/str_cat.h"
#include "train/flag_enums.h"
#include "train/flag_table.h"

namespace gpt {

using A = Arguments;  // rows are named by field: flag_name(&A::save_interval)

absl::Status validate_checkpoint_arguments(const Arguments& a) {
  auto invalid = [](const std::string& message) { return absl::InvalidArgumentError(message); };
  // Megatron's formats each ask for what this program's one format gives: torch_dist and
  // fsdp_dtensor a sharded checkpoint that loads into another parallel layout, torch_dcp PyTorch's
  // distributed checkpoint, torch one file per rank. The files are HDF5 in every case.
  if (!parse_flag_enum<CheckpointFormat>(a.ckpt_format)) {
    return invalid(absl::StrCat(flag_name(&A::ckpt_format), " ", a.ckpt_format,
                                " is not one of torch_dist, torch, torch_dcp, fsdp_dtensor (Megatron's) or hdf5"));
  }
  if (a.save_retain_interval < 0) {
    return invalid(
        absl::StrCat(flag_name(&A::save_retain_interval), " must be > 0 (got ", a.save_retain_interval, ")"));
  }
  if (flag_given(a, &A::save_retain_interval) && a.save_retain_interval == 0) {
    return invalid(absl::StrCat(flag_name(&A::save_retain_interval), " must be > 0 (got 0)"));
  }
  if (a.async_ckpt_use_cpu_shm && !a.async_save)
    return invalid(absl::StrCat(flag_name(&A::async_ckpt_use_cpu_shm), " needs ", flag_name(&A::async_save)));
  if (a.ckpt_fully_parallel_save && a.no_ckpt_fully_parallel_save) {
    return invalid(absl::StrCat(flag_name(&A::ckpt_fully_parallel_save), " and ",
                                flag_name(&A::no_ckpt_fully_parallel_save), " contradict each other"));
  }
  if (a.use_checkpoint_opt_param_scheduler && a.override_opt_param_scheduler) {
    // Megatron's validate_args: "both override and use-checkpoint are set."
    return invalid(absl::StrCat(
        flag_name(&A::use_checkpoint_opt_param_scheduler), " and ", flag_name(&A::override_opt_param_scheduler),
        " contradict each other: the first "
        "continues with the checkpoint's learning-rate schedule, the second with the command line's"));
  }
  const char* strictness[] = {"assume_ok_unexpected", "log_unexpected", "log_all", "raise_unexpected", "raise_all",
                              "ignore_all"};
  bool known = false;
  for (const char* s : strictness) known = known || a.dist_ckpt_strictness == s;
  if (!known) {
    return invalid(absl::StrCat(flag_name(&A::dist_ckpt_strictness), " ", a.dist_ckpt_strictness,
                                " is not one of assume_ok_unexpected, log_unexpected, log_all, raise_unexpected, "
                                "raise_all, ignore_all (the return_* values need Megatron's Python API)"));
  }
  if (a.save_interval < 0)
    return invalid(absl::StrCat(flag_name(&A::save_interval), " must be >= 0 (got ", a.save_interval, ")"));
  if (a.save_interval > 0 && a.save.empty())
    return invalid(absl::StrCat(flag_name(&A::save_interval), " needs ", flag_name(&A::save), " DIR"));
  if (flag_given(a, &A::save) && a.save.empty())
    return invalid(absl::StrCat(flag_name(&A::save), " needs a directory"));
  if (flag_given(a, &A::load) && a.load.empty())
    return invalid(absl::StrCat(flag_name(&A::load), " needs a directory"));
  if (a.ckpt_step < -1) return invalid(absl::StrCat(flag_name(&A::ckpt_step), " must be >= 0 (got ", a.ckpt_step, ")"));
  if (flag_given(a, &A::ckpt_step) && a.load.empty())
    return invalid(absl::StrCat(flag_name(&A::ckpt_step), " needs ", flag_name(&A::load), " DIR"));
  for (absl::string_view flag : {flag_name(&A::no_load_optim), flag_name(&A::no_load_rng), flag_name(&A::finetune),
                                 flag_name(&A::load_fallback_to_previous)}) {
    if (a.was_given(std::string(flag)) && a.load.empty())
      return invalid(absl::StrCat(flag, " needs ", flag_name(&A::load), " DIR"));
  }
  for (absl::string_view flag :
       {flag_name(&A::async_save), flag_name(&A::no_save_optim), flag_name(&A::keep_latest_checkpoints),
        flag_name(&A::allow_other_run_checkpoints), flag_name(&A::save_retain_interval)}) {
    if (a.was_given(std::string(flag)) && a.save.empty())
      return invalid(absl::StrCat(flag, " needs ", flag_name(&A::save), " DIR"));
  }
  if (a.use_persistent_ckpt_worker && !a.async_save)
    return invalid(absl::StrCat(flag_name(&A::use_persistent_ckpt_worker), " needs ", flag_name(&A::async_save)));
  if (a.exit_duration_in_mins < 0) {
    return invalid(
        absl::StrCat(flag_name(&A::exit_duration_in_mins), " must be >= 0 (got ", a.exit_duration_in_mins, ")"));
  }
  if (a.exit_interval < 0)
    return invalid(absl::StrCat(flag_name(&A::exit_interval), " must be >= 0 (got ", a.exit_interval, ")"));
  if (a.keep_latest_checkpoints < 0) {
    return invalid(
        absl::StrCat(flag_name(&A::keep_latest_checkpoints), " must be >= 0 (got ", a.keep_latest_checkpoints, ")"));
  }
  return absl::OkStatus();
}

}  // namespace gpt
