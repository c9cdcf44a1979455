#include "train/loss_scaling.h"

#include <cmath>
#include <cstdlib>

#include "absl/strings/numbers.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpt {

std::unique_ptr<LossScaling> LossScaling::from_arguments(const Arguments& a) {
  // Megatron's get_megatron_optimizer: a constant scaler for --loss-scale (FP16 or BF16), the
  // dynamic one for FP16 otherwise, none for BF16 without --loss-scale or FP32.
  if (a.was_given("--loss-scale") && (a.fp16 || a.bf16)) {
    return std::make_unique<LossScaling>(
        LossScalerConfig{.dynamic = false, .initial_scale = static_cast<float>(a.loss_scale)});
  }
  if (!a.fp16) return nullptr;
  return std::make_unique<LossScaling>(LossScalerConfig{.dynamic = true,
                                                        .initial_scale = static_cast<float>(a.initial_loss_scale),
                                                        .min_scale = static_cast<float>(a.min_loss_scale),
                                                        .window = a.loss_scale_window,
                                                        .hysteresis = a.hysteresis});
}

bool LossScaling::unscale_and_check(Context& ctx, const ParamStore& params, std::span<const Range> owned,
                                    const Tensor& count_scratch, const Tensor& float_scratch,
                                    std::span<Communicator* const> groups) {
  const bool found = unscale_and_check_gradients(ctx, params, owned, scaler_.inverse_scale(), count_scratch,
                                                 float_scratch, groups);
  scaler_.update(found);
  if (found) ++skipped_updates_;
  return found;
}

namespace {
constexpr const char* kScale = "loss_scaler/scale";
constexpr const char* kGrowth = "loss_scaler/growth_tracker";
constexpr const char* kHysteresis = "loss_scaler/hysteresis_tracker";
constexpr const char* kSkipped = "loss_scaler/skipped_updates";
}  // namespace

void LossScaling::save_records(std::map<std::string, std::string>& records) const {
  const LossScalerState& s = scaler_.state();
  records[kScale] = absl::StrFormat("%.9g", s.scale);  // 9 significant digits: every FP32 value exactly
  records[kGrowth] = absl::StrCat(s.growth_tracker);
  records[kHysteresis] = absl::StrCat(s.hysteresis_tracker);
  records[kSkipped] = absl::StrCat(skipped_updates_);
}

absl::Status LossScaling::load_records(const std::map<std::string, std::string>& records) {
  if (!records.count(kScale)) return absl::OkStatus();  // saved without loss scaling
  auto missing_or_bad = [](const char* key) {
    return absl::DataLossError(absl::StrCat("checkpoint record ", key, " is missing or malformed"));
  };
  LossScalerState state;
  double scale = 0.0;
  if (!absl::SimpleAtod(records.at(kScale), &scale) || !std::isfinite(scale) || !(scale > 0.0)) {
    return missing_or_bad(kScale);
  }
  state.scale = static_cast<float>(scale);
  int64_t skipped = 0;
  for (const auto& [key, value] : {std::pair{kGrowth, &state.growth_tracker},
                                   std::pair{kHysteresis, &state.hysteresis_tracker}, std::pair{kSkipped, &skipped}}) {
    auto it = records.find(key);
    if (it == records.end() || !absl::SimpleAtoi(it->second, value)) return missing_or_bad(key);
  }
  if (skipped < 0 || state.growth_tracker < 0) return missing_or_bad(skipped < 0 ? kSkipped : kGrowth);
  // A constant scaler keeps its --loss-scale (Megatron's ConstantGradScaler loads nothing); the
  // skipped count still carries over.
  if (scaler_.dynamic()) scaler_.set_state(state);
  skipped_updates_ = skipped;
  return absl::OkStatus();
}

}  // namespace gpt
