#include "train/checkpoint_arguments.h"

#include "absl/strings/str_cat.h"

namespace gpt {

absl::Status validate_checkpoint_arguments(const Arguments& a) {
  auto invalid = [](const std::string& message) { return absl::InvalidArgumentError(message); };
  // Megatron's formats each ask for what this program's one format gives: torch_dist and
  // fsdp_dtensor a sharded checkpoint that loads into another parallel layout, torch_dcp PyTorch's
  // distributed checkpoint, torch one file per rank. The files are HDF5 in every case.
  if (a.ckpt_format != "hdf5" && a.ckpt_format != "torch_dist" && a.ckpt_format != "torch" &&
      a.ckpt_format != "torch_dcp" && a.ckpt_format != "fsdp_dtensor") {
    return invalid(absl::StrCat("--ckpt-format ", a.ckpt_format,
                                " is not one of torch_dist, torch, torch_dcp, fsdp_dtensor (Megatron's) or hdf5"));
  }
  if (a.async_strategy != "nvrx" && a.async_strategy != "mcore") {
    return invalid(absl::StrCat("--async-strategy must be nvrx or mcore (got ", a.async_strategy, ")"));
  }
  if (a.save_retain_interval < 0) {
    return invalid(absl::StrCat("--save-retain-interval must be > 0 (got ", a.save_retain_interval, ")"));
  }
  if (a.was_given("--save-retain-interval") && a.save_retain_interval == 0) {
    return invalid("--save-retain-interval must be > 0 (got 0)");
  }
  if (a.async_ckpt_use_cpu_shm && !a.async_save) return invalid("--async-ckpt-use-cpu-shm needs --async-save");
  if (a.ckpt_fully_parallel_save && a.no_ckpt_fully_parallel_save) {
    return invalid("--ckpt-fully-parallel-save and --no-ckpt-fully-parallel-save contradict each other");
  }
  if (a.use_checkpoint_opt_param_scheduler && a.override_opt_param_scheduler) {
    // Megatron's validate_args: "both override and use-checkpoint are set."
    return invalid(
        "--use-checkpoint-opt_param-scheduler and --override-opt_param-scheduler contradict each other: the first "
        "continues with the checkpoint's learning-rate schedule, the second with the command line's");
  }
  const char* strictness[] = {"assume_ok_unexpected", "log_unexpected", "log_all", "raise_unexpected", "raise_all",
                              "ignore_all"};
  bool known = false;
  for (const char* s : strictness) known = known || a.dist_ckpt_strictness == s;
  if (!known) {
    return invalid(absl::StrCat("--dist-ckpt-strictness ", a.dist_ckpt_strictness,
                                " is not one of assume_ok_unexpected, log_unexpected, log_all, raise_unexpected, "
                                "raise_all, ignore_all (the return_* values need Megatron's Python API)"));
  }
  if (a.save_interval < 0) return invalid(absl::StrCat("--save-interval must be >= 0 (got ", a.save_interval, ")"));
  if (a.save_interval > 0 && a.save.empty()) return invalid("--save-interval needs --save DIR");
  if (a.was_given("--save") && a.save.empty()) return invalid("--save needs a directory");
  if (a.was_given("--load") && a.load.empty()) return invalid("--load needs a directory");
  if (a.ckpt_step < -1) return invalid(absl::StrCat("--ckpt-step must be >= 0 (got ", a.ckpt_step, ")"));
  if (a.was_given("--ckpt-step") && a.load.empty()) return invalid("--ckpt-step needs --load DIR");
  for (const char* flag : {"--no-load-optim", "--no-load-rng", "--finetune", "--load-fallback-to-previous"}) {
    if (a.was_given(flag) && a.load.empty()) return invalid(absl::StrCat(flag, " needs --load DIR"));
  }
  for (const char* flag :
       {"--async-save", "--no-save-optim", "--keep-latest-checkpoints", "--allow-other-run-checkpoints",
        "--save-retain-interval"}) {
    if (a.was_given(flag) && a.save.empty()) return invalid(absl::StrCat(flag, " needs --save DIR"));
  }
  if (a.use_persistent_ckpt_worker && !a.async_save) return invalid("--use-persistent-ckpt-worker needs --async-save");
  if (a.exit_duration_in_mins < 0) {
    return invalid(absl::StrCat("--exit-duration-in-mins must be >= 0 (got ", a.exit_duration_in_mins, ")"));
  }
  if (a.exit_interval < 0) return invalid(absl::StrCat("--exit-interval must be >= 0 (got ", a.exit_interval, ")"));
  if (a.keep_latest_checkpoints < 0) {
    return invalid(absl::StrCat("--keep-latest-checkpoints must be >= 0 (got ", a.keep_latest_checkpoints, ")"));
  }
  return absl::OkStatus();
}

}  // namespace gpt
