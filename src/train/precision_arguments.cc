#include "train/precision_arguments.h"

#include <cmath>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "train/flag_table.h"

namespace gpt {

using A = Arguments;  // rows are named by field: flag_name(&A::save_interval)

namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

// A scale must be a positive FP32 number (Megatron's scaler keeps it in a float32 tensor).
absl::Status require_positive_fp32(absl::string_view flag, double value) {
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
  if (a.fp16 && a.bf16)
    return invalid(
        absl::StrCat(flag_name(&A::fp16), " and ", flag_name(&A::bf16), " are mutually exclusive: choose one"));
  const bool constant = flag_given(a, &A::loss_scale);
  if (constant) {
    if (!a.fp16 && !a.bf16) {
      return invalid(absl::StrCat(flag_name(&A::loss_scale), " needs ", flag_name(&A::fp16), " or ",
                                  flag_name(&A::bf16), " (FP32 training has no loss scaler)"));
    }
    GPT_RETURN_IF_ERROR(require_positive_fp32(flag_name(&A::loss_scale), a.loss_scale));
  }
  const bool dynamic = a.fp16 && !constant;
  for (absl::string_view flag : {flag_name(&A::initial_loss_scale), flag_name(&A::min_loss_scale),
                                 flag_name(&A::loss_scale_window), flag_name(&A::hysteresis)}) {
    if (a.was_given(std::string(flag)) && !dynamic) {
      return invalid(absl::StrCat(flag, " applies to ", flag_name(&A::fp16),
                                  "'s dynamic loss scaler, which this run does not use (",
                                  !a.fp16 ? absl::StrCat("no ", flag_name(&A::fp16))
                                          : absl::StrCat(flag_name(&A::loss_scale), " fixes the scale"),
                                  ")"));
    }
  }
  GPT_RETURN_IF_ERROR(require_positive_fp32(flag_name(&A::initial_loss_scale), a.initial_loss_scale));
  GPT_RETURN_IF_ERROR(require_positive_fp32(flag_name(&A::min_loss_scale), a.min_loss_scale));
  if (static_cast<float>(a.min_loss_scale) > static_cast<float>(a.initial_loss_scale)) {
    return invalid(absl::StrCat(flag_name(&A::min_loss_scale), " (", a.min_loss_scale, ") must not exceed ",
                                flag_name(&A::initial_loss_scale), " (", a.initial_loss_scale, ")"));
  }
  if (a.loss_scale_window <= 0) {
    return invalid(absl::StrCat(flag_name(&A::loss_scale_window), " must be positive (got ", a.loss_scale_window, ")"));
  }
  if (a.hysteresis <= 0)
    return invalid(absl::StrCat(flag_name(&A::hysteresis), " must be positive (got ", a.hysteresis, ")"));
  return absl::OkStatus();
}

}  // namespace gpt
