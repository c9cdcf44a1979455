#include "train/scheduler_position.h"

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"

namespace gpt {
namespace {
constexpr const char* kNumSteps = "opt_param_scheduler/num_steps";
}  // namespace

void SchedulerPosition::save_records(std::map<std::string, std::string>& records) const {
  records[kNumSteps] = absl::StrCat(samples_);
}

absl::Status SchedulerPosition::load_records(const std::map<std::string, std::string>& records) {
  auto it = records.find(kNumSteps);
  if (it == records.end()) {
    samples_ = before_records_();
    return absl::OkStatus();
  }
  int64_t samples = 0;
  if (!absl::SimpleAtoi(it->second, &samples) || samples < 0) {
    return absl::DataLossError(absl::StrCat("checkpoint record ", kNumSteps, " is missing or malformed"));
  }
  samples_ = samples;
  return absl::OkStatus();
}

}  // namespace gpt
