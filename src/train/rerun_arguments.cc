#include "train/rerun_arguments.h"

#include "absl/strings/str_cat.h"
#include "train/flag_enums.h"
#include "train/flag_table.h"

namespace gpt {

using A = Arguments;  // rows are named by field: flag_name(&A::save_interval)

namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

absl::Status validate_rerun_arguments(const Arguments& a) {
  if (!parse_flag_enum<RerunMode>(a.rerun_mode)) {
    return invalid(absl::StrCat(flag_name(&A::rerun_mode), " must be ", names_for_message(flag_enum_names<RerunMode>()),
                                ", got '", a.rerun_mode, "'"));
  }
  if (!parse_flag_enum<ErrorInjectionType>(a.error_injection_type)) {
    return invalid(absl::StrCat(flag_name(&A::error_injection_type), " must be ",
                                names_for_message(flag_enum_names<ErrorInjectionType>()), ", got '",
                                a.error_injection_type, "'"));
  }
  if (a.error_injection_rate < 0) {
    return invalid(absl::StrCat(flag_name(&A::error_injection_rate), " must be >= 0 (0: no injection), got ",
                                a.error_injection_rate));
  }
  if (a.error_injection_rate == 0) return absl::OkStatus();
  // Megatron draws injections only in validate_results' validation calls; elsewhere it ignores the
  // flag silently.
  if (rerun_mode(a) != RerunMode::kValidateResults) {
    return invalid(absl::StrCat(flag_name(&A::error_injection_rate), " injects results into the checks of ",
                                flag_name(&A::rerun_mode), " validate_results; with ", flag_name(&A::rerun_mode), " ",
                                a.rerun_mode,
                                " nothing is validated (this program's default is disabled, Megatron's "
                                "validate_results): add ",
                                flag_name(&A::rerun_mode), " validate_results"));
  }
  if (a.no_check_for_nan_in_loss_and_grad && !a.check_for_spiky_loss) {
    return invalid(absl::StrCat(
        flag_name(&A::error_injection_rate),
        " has no validation call to inject into: ", flag_name(&A::no_check_for_nan_in_loss_and_grad),
        " turns off the NaN and Inf checks of the loss; drop it or add ", flag_name(&A::check_for_spiky_loss)));
  }
  return absl::OkStatus();
}

}  // namespace gpt
