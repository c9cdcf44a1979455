#include "train/fp8_arguments.h"

#include "absl/strings/str_cat.h"

namespace gpt {
namespace {
absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }
}  // namespace

absl::Status validate_fp8(const Arguments& a) {
  if (a.fp8_format.empty()) {
    // Without --fp8-format Megatron does not use the other FP8 flags; one given anyway would be
    // accepted and ignored, so it is refused.
    for (const char* flag : {"--fp8-recipe", "--fp8-margin", "--fp8-amax-history-len", "--fp8-amax-compute-algo",
                             "--no-fp8-wgrad", "--fp8-interval"}) {
      if (a.was_given(flag)) return invalid(absl::StrCat(flag, " applies only with --fp8-format e4m3 or hybrid"));
    }
    return absl::OkStatus();
  }
  if (a.fp8_format != "e4m3" && a.fp8_format != "hybrid") {
    return invalid(absl::StrCat("--fp8-format must be e4m3 or hybrid (got ", a.fp8_format, ")"));
  }
  if (a.fp8_recipe == "mxfp8" || a.fp8_recipe == "blockwise") {
    return invalid(absl::StrCat("--fp8-recipe ", a.fp8_recipe,
                                " is not available in this program (block-scaled FP8 needs Blackwell's GEMMs): use "
                                "tensorwise or delayed"));
  }
  if (a.fp8_recipe != "tensorwise" && a.fp8_recipe != "delayed") {
    return invalid(absl::StrCat("--fp8-recipe must be tensorwise or delayed (got ", a.fp8_recipe, ")"));
  }
  if (a.fp8_recipe == "tensorwise") {
    // Megatron hands these to Transformer Engine's DelayedScaling only.
    for (const char* flag : {"--fp8-margin", "--fp8-amax-history-len", "--fp8-amax-compute-algo"}) {
      if (a.was_given(flag)) {
        return invalid(absl::StrCat(flag, " applies only with --fp8-recipe delayed (tensorwise scales each tensor by "
                                          "its own amax)"));
      }
    }
  }
  if (a.fp8_margin < 0 || a.fp8_margin > 64) {
    return invalid(absl::StrCat("--fp8-margin must be in [0, 64] (got ", a.fp8_margin, ")"));
  }
  if (a.fp8_amax_history_len < 1 || a.fp8_amax_history_len > 1024) {
    return invalid(absl::StrCat("--fp8-amax-history-len must be in [1, 1024] (got ", a.fp8_amax_history_len, ")"));
  }
  if (a.fp8_amax_compute_algo != "most_recent" && a.fp8_amax_compute_algo != "max") {
    return invalid(
        absl::StrCat("--fp8-amax-compute-algo must be most_recent or max (got ", a.fp8_amax_compute_algo, ")"));
  }
  if (a.fp8_interval != 1) {
    return invalid(absl::StrCat("--fp8-interval ", a.fp8_interval,
                                " is not available: scales are updated every step (Megatron deprecated the flag, and "
                                "Transformer Engine no longer reads it)"));
  }
  return absl::OkStatus();
}

}  // namespace gpt
