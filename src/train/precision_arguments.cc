#include "train/precision_arguments.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"

namespace gpt {
namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// A scale must be a positive FP32 number (Megatron's scaler keeps it in a float32 tensor).
absl::Status require_positive_fp32(const char* flag, double value) {
  if (!std::isfinite(value) || !(value > 0.0)) {
    return invalid(absl::StrCat(flag, " must be positive and finite (got ", value, ")"));
  }
  if (value > static_cast<double>(std::numeric_limits<float>::max())) {
    return invalid(absl::StrCat(flag, " (", value, ") is beyond the FP32 range (at most 3.4e38)"));
  }
  if (!(static_cast<float>(value) > 0.0f)) {
    return invalid(absl::StrCat(flag, " must be positive and representable in FP32 (got ", value, ")"));
  }
  return absl::OkStatus();
}

}  // namespace

absl::Status validate_loss_scaling(const Arguments& a) {
  if (a.fp16 && a.bf16) return invalid("--fp16 and --bf16 are mutually exclusive: choose one");
  const bool constant = a.was_given("--loss-scale");
  if (constant) {
    if (!a.fp16 && !a.bf16) {
      return invalid("--loss-scale needs --fp16 or --bf16 (FP32 training has no loss scaler)");
    }
    GPT_RETURN_IF_ERROR(require_positive_fp32("--loss-scale", a.loss_scale));
  }
  const bool dynamic = a.fp16 && !constant;
  for (const char* flag : {"--initial-loss-scale", "--min-loss-scale", "--loss-scale-window", "--hysteresis"}) {
    if (a.was_given(flag) && !dynamic) {
      return invalid(absl::StrCat(flag, " applies to --fp16's dynamic loss scaler, which this run does not use (",
                                  !a.fp16 ? "no --fp16" : "--loss-scale fixes the scale", ")"));
    }
  }
  GPT_RETURN_IF_ERROR(require_positive_fp32("--initial-loss-scale", a.initial_loss_scale));
  GPT_RETURN_IF_ERROR(require_positive_fp32("--min-loss-scale", a.min_loss_scale));
  if (static_cast<float>(a.min_loss_scale) > static_cast<float>(a.initial_loss_scale)) {
    return invalid(absl::StrCat("--min-loss-scale (", a.min_loss_scale, ") must not exceed --initial-loss-scale (",
                                a.initial_loss_scale, ")"));
  }
  if (a.loss_scale_window <= 0) {
    return invalid(absl::StrCat("--loss-scale-window must be positive (got ", a.loss_scale_window, ")"));
  }
  if (a.hysteresis <= 0) return invalid(absl::StrCat("--hysteresis must be positive (got ", a.hysteresis, ")"));
  return absl::OkStatus();
}

}  // namespace gpt
