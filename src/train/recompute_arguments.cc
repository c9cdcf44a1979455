#include "train/recompute_arguments.h"

#include "absl/strings/str_cat.h"
#include "train/flag_enums.h"
#include "train/flag_table.h"

namespace gpt {

using A = Arguments;  // rows are named by field: flag_name(&A::save_interval)

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
    return invalid(absl::StrCat(flag_name(&A::recompute_activations), " (selective recompute) and ",
                                flag_name(&A::recompute_granularity),
                                " full cannot both be "
                                "given"));
  }
  const bool method_given = flag_given(a, &A::recompute_method);
  const bool count_given = flag_given(a, &A::recompute_num_layers);
  const std::optional<RecomputeMethod> method = parse_flag_enum<RecomputeMethod>(a.recompute_method);
  if (method_given && (!method || *method == RecomputeMethod::kNone)) {
    return invalid(
        absl::StrCat(flag_name(&A::recompute_method), " must be uniform or block (got ", a.recompute_method, ")"));
  }
  if (granularity == RecomputeGranularity::kNone) {
    if (method_given || count_given) {
      return invalid(absl::StrCat(flag_name(&A::recompute_method), " and ", flag_name(&A::recompute_num_layers),
                                  " need ", flag_name(&A::recompute_granularity),
                                  " full (without it "
                                  "nothing is recomputed)"));
    }
    return absl::OkStatus();
  }
  if (granularity == RecomputeGranularity::kSelective) {
    if (method_given) {
      return invalid(absl::StrCat(flag_name(&A::recompute_method), " is not supported with ",
                                  flag_name(&A::recompute_granularity),
                                  " selective (selective "
                                  "recomputes the attention core of every layer)"));
    }
    if (count_given)
      return invalid(absl::StrCat(flag_name(&A::recompute_num_layers), " must not be given with ",
                                  flag_name(&A::recompute_granularity), " selective"));
    return absl::OkStatus();
  }
  if (!method_given)
    return invalid(absl::StrCat(flag_name(&A::recompute_granularity), " full needs ", flag_name(&A::recompute_method),
                                " uniform or block"));
  if (!count_given) {
    return invalid(absl::StrCat(flag_name(&A::recompute_granularity), " full needs ",
                                flag_name(&A::recompute_num_layers),
                                " (between 1 and the layers per "
                                "pipeline stage)"));
  }
  if (a.recompute_num_layers < 1) {
    return invalid(
        absl::StrCat(flag_name(&A::recompute_num_layers), " must be at least 1 (got ", a.recompute_num_layers, ")"));
  }
  return absl::OkStatus();
}


}  // namespace gpt
