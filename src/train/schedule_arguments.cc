#include "train/schedule_arguments.h"

#include "absl/strings/str_cat.h"

namespace gpt {
namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

// Megatron's rules on the run's length and the schedule's units (arguments.py validate_args):
// --train-iters with iteration-based schedule flags, or --train-samples with sample-based ones. A
// warmup of 0 in the other unit is allowed, as there.
absl::Status validate_schedule_arguments(Arguments& a) {
  if (a.was_given("--train-samples")) {
    if (a.was_given("--lr-decay-iters")) {
      return invalid("--lr-decay-iters cannot be given with --train-samples (sample-based training): use "
                     "--lr-decay-samples");
    }
    if (a.lr_warmup_iters != 0) {
      return invalid("--lr-warmup-iters cannot be given with --train-samples (sample-based training): use "
                     "--lr-warmup-samples or --lr-warmup-fraction");
    }
    if (a.lr_warmup_fraction >= 0.0 && a.lr_warmup_samples != 0) {
      return invalid("--lr-warmup-fraction and --lr-warmup-samples cannot both be given");
    }
    if (!a.was_given("--lr-decay-samples")) a.lr_decay_samples = a.train_samples;
    return absl::OkStatus();
  }
  if (a.was_given("--lr-decay-samples")) {
    return invalid("--lr-decay-samples needs --train-samples (sample-based training): with --train-iters use "
                   "--lr-decay-iters");
  }
  if (a.lr_warmup_samples != 0) {
    return invalid("--lr-warmup-samples needs --train-samples (sample-based training): with --train-iters use "
                   "--lr-warmup-iters or --lr-warmup-fraction");
  }
  return absl::OkStatus();
}



}  // namespace gpt
