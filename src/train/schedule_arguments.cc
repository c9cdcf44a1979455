#include "train/schedule_arguments.h"

#include "absl/strings/str_cat.h"
#include "train/flag_enums.h"
#include "train/flag_table.h"

namespace gpt {

using A = Arguments;  // rows are named by field: flag_name(&A::save_interval)

namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

// Megatron's rules on the run's length and the schedule's units (arguments.py validate_args):
// --train-iters with iteration-based schedule flags, or --train-samples with sample-based ones. A
// warmup of 0 in the other unit is allowed, as there.
absl::Status validate_schedule_arguments(const Arguments& a) {
  if (flag_given(a, &A::train_samples)) {
    if (flag_given(a, &A::lr_decay_iters)) {
      return invalid(absl::StrCat(flag_name(&A::lr_decay_iters), " cannot be given with ", flag_name(&A::train_samples),
                                  " (sample-based training): use ", flag_name(&A::lr_decay_samples)));
    }
    if (a.lr_warmup_iters != 0) {
      return invalid(absl::StrCat(flag_name(&A::lr_warmup_iters), " cannot be given with ",
                                  flag_name(&A::train_samples), " (sample-based training): use ",
                                  flag_name(&A::lr_warmup_samples), " or ", flag_name(&A::lr_warmup_fraction)));
    }
    if (a.lr_warmup_fraction >= 0.0 && a.lr_warmup_samples != 0) {
      return invalid(absl::StrCat(flag_name(&A::lr_warmup_fraction), " and ", flag_name(&A::lr_warmup_samples),
                                  " cannot both be given"));
    }
    return absl::OkStatus();
  }
  if (flag_given(a, &A::lr_decay_samples)) {
    return invalid(absl::StrCat(flag_name(&A::lr_decay_samples), " needs ", flag_name(&A::train_samples),
                                " (sample-based training): with ", flag_name(&A::train_iters), " use ",
                                flag_name(&A::lr_decay_iters)));
  }
  if (a.lr_warmup_samples != 0) {
    return invalid(absl::StrCat(flag_name(&A::lr_warmup_samples), " needs ", flag_name(&A::train_samples),
                                " (sample-based training): with ", flag_name(&A::train_iters), " use ",
                                flag_name(&A::lr_warmup_iters), " or ", flag_name(&A::lr_warmup_fraction)));
  }
  return absl::OkStatus();
}



}  // namespace gpt
