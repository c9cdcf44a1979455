// The learning-rate schedule and weight decay a resumed run continues with, as Megatron's
// OptimizerParamScheduler.load_state_dict decides it: by default the checkpoint's settings and the
// command line's must agree (a difference stops the run, naming both values);
// --use-checkpoint-opt_param-scheduler continues with the checkpoint's,
// --override-opt_param-scheduler with the command line's. The settings compared are Megatron's:
// peak and minimum learning rate, warmup and decay lengths in samples, decay style, weight decay,
// and the word embedding and output layer's peak and minimum with --decoupled-lr (Megatron keeps
// them as its param groups' max_lr / min_lr in the checkpoint).
#pragma once

#include <string>

#include "core/status.h"
#include "optim/lr_schedule.h"
#include "train/args/arguments.h"

namespace gpt {

struct SchedulerSettings {
  LrScheduleConfig schedule;  // in samples (train/configs.h, lr_schedule_config)
  LrScheduleConfig decoupled_schedule;  // the word embedding and output layer's (--decoupled-lr)
  double weight_decay = 0.0;
};

SchedulerSettings scheduler_settings(const Arguments& args);

// The settings to continue with after loading a checkpoint saved with `saved_arguments` (its
// "--flag value" text), or an error naming each differing setting with both values. A checkpoint
// that does not record a flag keeps the command line's value for it.
absl::StatusOr<SchedulerSettings> resumed_scheduler_settings(const std::string& saved_arguments, const Arguments& args,
                                                             const std::string& directory);

}  // namespace gpt
