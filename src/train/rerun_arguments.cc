#include "train/rerun_arguments.h"

#include "absl/strings/str_cat.h"

namespace gpt {
namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

absl::Status validate_rerun_arguments(const Arguments& a) {
  if (a.rerun_mode != "disabled" && a.rerun_mode != "validate_results" && a.rerun_mode != "report_stats") {
    return invalid(absl::StrCat("--rerun-mode must be disabled, validate_results or report_stats, got '",
                                a.rerun_mode, "'"));
  }
  if (a.error_injection_type != "correct_result" && a.error_injection_type != "transient_error" &&
      a.error_injection_type != "persistent_error") {
    return invalid(absl::StrCat("--error-injection-type must be correct_result, transient_error or persistent_error, "
                                "got '", a.error_injection_type, "'"));
  }
  if (a.error_injection_rate < 0) {
    return invalid(absl::StrCat("--error-injection-rate must be >= 0 (0: no injection), got ",
                                a.error_injection_rate));
  }
  if (a.error_injection_rate == 0) return absl::OkStatus();
  // Megatron draws injections only in validate_results' validation calls; elsewhere it ignores the
  // flag silently.
  if (a.rerun_mode != "validate_results") {
    return invalid(absl::StrCat("--error-injection-rate injects results into the checks of --rerun-mode "
                                "validate_results; with --rerun-mode ", a.rerun_mode,
                                " nothing is validated (this program's default is disabled, Megatron's "
                                "validate_results): add --rerun-mode validate_results"));
  }
  if (a.no_check_for_nan_in_loss_and_grad && !a.check_for_spiky_loss) {
    return invalid("--error-injection-rate has no validation call to inject into: "
                   "--no-check-for-nan-in-loss-and-grad turns off the NaN and Inf checks of the loss; drop it or add "
                   "--check-for-spiky-loss");
  }
  return absl::OkStatus();
}

}  // namespace gpt
