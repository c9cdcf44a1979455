#include "train/scheduler_resume.h"

#include <cstdlib>
#include <map>
#include <type_traits>
#include <variant>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_join.h"
#include "checkpoint/checkpoint_files.h"
#include "train/configs.h"
#include "train/args/flag_table.h"
#include "train/args/schedule_arguments.h"

namespace gpt {
namespace {

// The flags the schedule is derived from (lr_schedule_config) and the weight decay.
constexpr const char* kScheduleFlags[] = {"--lr",
                                          "--min-lr",
                                          "--lr-decay-style",
                                          "--lr-decay-iters",
                                          "--lr-decay-samples",
                                          "--lr-warmup-iters",
                                          "--lr-warmup-samples",
                                          "--lr-warmup-fraction",
                                          "--train-iters",
                                          "--train-samples",
                                          "--global-batch-size",
                                          "--weight-decay",
                                          "--decoupled-lr",
                                          "--decoupled-min-lr"};

// Sets a row's field from its canonical text (train/args/flag_table.h: numbers as written, strings
// quoted). False when the text does not parse.
bool set_from_canonical(const FlagRow& row, const std::string& text, Arguments& args) {
  return std::visit(
      [&](auto member) {
        auto& field = args.*member;
        using Field = std::remove_reference_t<decltype(field)>;
        char* end = nullptr;
        if constexpr (std::is_same_v<Field, int64_t>) {
          field = std::strtoll(text.c_str(), &end, 10);
          return end != text.c_str() && *end == '\0';
        } else if constexpr (std::is_same_v<Field, double>) {
          field = std::strtod(text.c_str(), &end);
          return end != text.c_str() && *end == '\0';
        } else if constexpr (std::is_same_v<Field, std::string>) {
          if (text.size() < 2 || text.front() != '\'' || text.back() != '\'') return false;
          field = text.substr(1, text.size() - 2);
          return true;
        } else {
          return false;
        }
      },
      row.field);
}

std::string style_name(LrDecayStyle style) {
  switch (style) {
    case LrDecayStyle::kConstant: return "constant";
    case LrDecayStyle::kLinear: return "linear";
    case LrDecayStyle::kCosine: return "cosine";
  }
  return "?";
}

}  // namespace

SchedulerSettings scheduler_settings(const Arguments& args) {
  return SchedulerSettings{.schedule = lr_schedule_config(args),
                           .decoupled_schedule = decoupled_lr_schedule_config(args),
                           .weight_decay = args.weight_decay};
}

absl::StatusOr<SchedulerSettings> resumed_scheduler_settings(const std::string& saved_arguments, const Arguments& args,
                                                             const std::string& directory) {
  const SchedulerSettings ours = scheduler_settings(args);
  if (args.override_opt_param_scheduler) return ours;
  const std::map<std::string, std::string> saved = arguments_by_flag(saved_arguments);
  Arguments theirs_args = args;
  for (const char* flag : kScheduleFlags) {
    auto it = saved.find(flag);
    if (it == saved.end()) continue;
    const FlagRow* row = find_flag_row(flag);
    if (row == nullptr || !set_from_canonical(*row, it->second, theirs_args)) {
      return absl::DataLossError(
          absl::StrCat("checkpoint ", directory, ": its saved ", flag, " value ", it->second, " does not parse"));
    }
  }
  const SchedulerSettings theirs = scheduler_settings(theirs_args);
  if (args.use_checkpoint_opt_param_scheduler) return theirs;
  // Megatron's names for the settings (OptimizerParamScheduler._check_and_set).
  std::vector<std::string> differences;
  auto compare = [&](const char* name, const std::string& mine, const std::string& checkpoint) {
    if (mine != checkpoint) differences.push_back(absl::StrCat(name, " ", mine, " (checkpoint: ", checkpoint, ")"));
  };
  auto number = [](double v) { return absl::StrFormat("%.9g", v); };
  compare("learning rate", number(ours.schedule.max_lr), number(theirs.schedule.max_lr));
  compare("minimum learning rate", number(ours.schedule.min_lr), number(theirs.schedule.min_lr));
  compare("warmup samples", number(ours.schedule.warmup_steps), number(theirs.schedule.warmup_steps));
  compare("decay samples", absl::StrCat(ours.schedule.decay_steps), absl::StrCat(theirs.schedule.decay_steps));
  compare("decay style", style_name(ours.schedule.style), style_name(theirs.schedule.style));
  compare("weight decay", number(ours.weight_decay), number(theirs.weight_decay));
  if (args.decoupled_lr >= 0.0 || theirs_args.decoupled_lr >= 0.0) {
    auto decoupled = [&](const Arguments& a, double value) { return a.decoupled_lr >= 0.0 ? number(value) : "none"; };
    compare("decoupled learning rate", decoupled(args, ours.decoupled_schedule.max_lr),
            decoupled(theirs_args, theirs.decoupled_schedule.max_lr));
    compare("decoupled minimum learning rate", decoupled(args, ours.decoupled_schedule.min_lr),
            decoupled(theirs_args, theirs.decoupled_schedule.min_lr));
  }
  if (differences.empty()) return ours;
  return absl::FailedPreconditionError(absl::StrCat(
      "checkpoint ", directory, " was saved with another learning-rate schedule: ", absl::StrJoin(differences, ", "),
      "; give --use-checkpoint-opt_param-scheduler to continue with the checkpoint's or "
      "--override-opt_param-scheduler to continue with this command line's"));
}

}  // namespace gpt
