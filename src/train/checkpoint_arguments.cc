#include "train/checkpoint_arguments.h"

#include "absl/strings/str_cat.h"

namespace gpt {

absl::Status validate_checkpoint_arguments(const Arguments& a) {
  auto invalid = [](const std::string& message) { return absl::InvalidArgumentError(message); };
  if (a.ckpt_format != "hdf5") {
    return invalid(absl::StrCat("--ckpt-format ", a.ckpt_format,
                                " is not supported: this program writes and reads its own sharded HDF5 format "
                                "(--ckpt-format hdf5, the default)"));
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
       {"--async-save", "--no-save-optim", "--keep-latest-checkpoints", "--allow-other-run-checkpoints"}) {
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
