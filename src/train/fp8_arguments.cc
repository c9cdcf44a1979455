#include "train/fp8_arguments.h"

#include "absl/strings/str_cat.h"
#include "train/flag_enums.h"
#include "train/flag_table.h"

namespace gpt {

using A = Arguments;  // rows are named by field: flag_name(&A::save_interval)

namespace {
absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }
}  // namespace

absl::Status validate_fp8(const Arguments& a) {
  if (a.fp8_format.empty()) {
    // Without --fp8-format Megatron does not use the other FP8 flags; one given anyway would be
    // accepted and ignored, so it is refused.
    for (absl::string_view flag :
         {flag_name(&A::fp8_recipe), flag_name(&A::fp8_margin), flag_name(&A::fp8_amax_history_len),
          flag_name(&A::fp8_amax_compute_algo), flag_name(&A::no_fp8_wgrad), flag_name(&A::fp8_interval)}) {
      if (a.was_given(std::string(flag)))
        return invalid(absl::StrCat(flag, " applies only with ", flag_name(&A::fp8_format), " e4m3 or hybrid"));
    }
    return absl::OkStatus();
  }
  if (!parse_flag_enum<Fp8FormatChoice>(a.fp8_format)) {
    return invalid(absl::StrCat(flag_name(&A::fp8_format), " must be ",
                                names_for_message(flag_enum_names<Fp8FormatChoice>()), " (got ", a.fp8_format, ")"));
  }
  if (a.fp8_recipe == "mxfp8" || a.fp8_recipe == "blockwise") {
    return invalid(absl::StrCat(flag_name(&A::fp8_recipe), " ", a.fp8_recipe,
                                " is not available in this program (block-scaled FP8 needs Blackwell's GEMMs): use "
                                "tensorwise or delayed"));
  }
  const std::optional<Fp8Recipe> recipe = parse_flag_enum<Fp8Recipe>(a.fp8_recipe);
  if (!recipe) {
    return invalid(absl::StrCat(flag_name(&A::fp8_recipe), " must be ", names_for_message(flag_enum_names<Fp8Recipe>()),
                                " (got ", a.fp8_recipe, ")"));
  }
  if (*recipe == Fp8Recipe::kTensorwise) {
    // Megatron hands these to Transformer Engine's DelayedScaling only.
    for (absl::string_view flag :
         {flag_name(&A::fp8_margin), flag_name(&A::fp8_amax_history_len), flag_name(&A::fp8_amax_compute_algo)}) {
      if (a.was_given(std::string(flag))) {
        return invalid(absl::StrCat(flag, " applies only with ", flag_name(&A::fp8_recipe),
                                    " delayed (tensorwise scales each tensor by "
                                    "its own amax)"));
      }
    }
  }
  if (a.fp8_margin < 0 || a.fp8_margin > 64) {
    return invalid(absl::StrCat(flag_name(&A::fp8_margin), " must be in [0, 64] (got ", a.fp8_margin, ")"));
  }
  if (a.fp8_amax_history_len < 1 || a.fp8_amax_history_len > 1024) {
    return invalid(
        absl::StrCat(flag_name(&A::fp8_amax_history_len), " must be in [1, 1024] (got ", a.fp8_amax_history_len, ")"));
  }
  if (!parse_flag_enum<AmaxComputeAlgo>(a.fp8_amax_compute_algo)) {
    return invalid(absl::StrCat(flag_name(&A::fp8_amax_compute_algo), " must be ",
                                names_for_message(flag_enum_names<AmaxComputeAlgo>()), " (got ",
                                a.fp8_amax_compute_algo, ")"));
  }
  if (a.fp8_interval != 1) {
    return invalid(absl::StrCat(flag_name(&A::fp8_interval), " ", a.fp8_interval,
                                " is not available: scales are updated every step (Megatron deprecated the flag, and "
                                "Transformer Engine no longer reads it)"));
  }
  return absl::OkStatus();
}

}  // namespace gpt
