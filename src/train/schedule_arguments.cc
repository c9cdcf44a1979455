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

LrScheduleConfig lr_schedule_config(const Arguments& a) {
  LrScheduleConfig c;
  c.max_lr = a.lr;
  c.min_lr = a.min_lr;
  const bool by_samples = a.train_samples > 0;
  c.decay_steps = by_samples ? (a.lr_decay_samples > 0 ? a.lr_decay_samples : a.train_samples)
                             : a.lr_decay_iters * a.global_batch_size;
  const int64_t warmup = by_samples ? a.lr_warmup_samples : a.lr_warmup_iters * a.global_batch_size;
  c.warmup_steps = a.lr_warmup_fraction >= 0.0 ? a.lr_warmup_fraction * static_cast<double>(c.decay_steps)
                                               : static_cast<double>(warmup);
  c.style = lr_decay_style(a);
  return c;
}

LrScheduleConfig decoupled_lr_schedule_config(const Arguments& a) {
  LrScheduleConfig c = lr_schedule_config(a);
  if (a.decoupled_lr >= 0.0) {
    c.max_lr = a.decoupled_lr;
    if (a.decoupled_min_lr >= 0.0) c.min_lr = a.decoupled_min_lr;
  }
  return c;
}


}  // namespace gpt
