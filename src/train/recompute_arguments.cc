#include "train/recompute_arguments.h"

#include "absl/strings/str_cat.h"
#include "train/flag_enums.h"

namespace gpt {
namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

}  // namespace

// Megatron's rules (transformer_config.py __post_init__, arguments.py validate_args), except that
// a method or count without full recompute is refused where Megatron would silently ignore it.
// The count's upper bound needs the pipeline layout: validate_for_world.
absl::Status validate_recompute_arguments(const Arguments& a) {
  // --recompute-activations became --recompute-granularity selective in resolve_defaults, except
  // with full.
  const RecomputeGranularity granularity = recompute_granularity(a);
  if (a.recompute_activations && granularity == RecomputeGranularity::kFull) {
    return invalid("--recompute-activations (selective recompute) and --recompute-granularity full cannot both be "
                   "given");
  }
  const bool method_given = a.was_given("--recompute-method");
  const bool count_given = a.was_given("--recompute-num-layers");
  const std::optional<RecomputeMethod> method = parse_flag_enum<RecomputeMethod>(a.recompute_method);
  if (method_given && (!method || *method == RecomputeMethod::kNone)) {
    return invalid(absl::StrCat("--recompute-method must be uniform or block (got ", a.recompute_method, ")"));
  }
  if (granularity == RecomputeGranularity::kNone) {
    if (method_given || count_given) {
      return invalid("--recompute-method and --recompute-num-layers need --recompute-granularity full (without it "
                     "nothing is recomputed)");
    }
    return absl::OkStatus();
  }
  if (granularity == RecomputeGranularity::kSelective) {
    if (method_given) {
      return invalid("--recompute-method is not supported with --recompute-granularity selective (selective "
                     "recomputes the attention core of every layer)");
    }
    if (count_given) return invalid("--recompute-num-layers must not be given with --recompute-granularity selective");
    return absl::OkStatus();
  }
  if (!method_given) return invalid("--recompute-granularity full needs --recompute-method uniform or block");
  if (!count_given) {
    return invalid("--recompute-granularity full needs --recompute-num-layers (between 1 and the layers per "
                   "pipeline stage)");
  }
  if (a.recompute_num_layers < 1) {
    return invalid(absl::StrCat("--recompute-num-layers must be at least 1 (got ", a.recompute_num_layers, ")"));
  }
  return absl::OkStatus();
}


}  // namespace gpt
