#include "train/pipeline_arguments.h"

#include <algorithm>
#include <cstdint>
#include <limits>
#include <string>

#include "absl/strings/str_cat.h"
#include "parallel/pipeline/schedule.h"
#include "train/flag_enums.h"
#include "train/flag_table.h"
#include "train/pipeline_split.h"

namespace gpt {

using A = Arguments;  // rows are named by field: flag_name(&A::save_interval)

namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

constexpr int64_t kIntMax = std::numeric_limits<int>::max();

}  // namespace

absl::Status validate_schedule_flags(const Arguments& a) {
  if (!parse_flag_enum<PipelineScheduleFlag>(a.pipeline_schedule)) {
    return invalid(absl::StrCat(flag_name(&A::pipeline_schedule), " must be ",
                                names_for_message(flag_enum_names<PipelineScheduleFlag>()), ", got '",
                                a.pipeline_schedule, "'"));
  }
  const PipelineScheduleFlag schedule = pipeline_schedule_flag(a);
  if (flag_given(a, &A::pipeline_schedule_costs) && schedule != PipelineScheduleFlag::kAuto) {
    return invalid(absl::StrCat(flag_name(&A::pipeline_schedule_costs), " gives the costs ",
                                flag_name(&A::pipeline_schedule), " auto chooses by; it needs ",
                                flag_name(&A::pipeline_schedule), " auto"));
  }
  if (flag_given(a, &A::pipeline_schedule_costs) && a.pipeline_schedule_costs.empty()) {
    return invalid(absl::StrCat(flag_name(&A::pipeline_schedule_costs), " needs a path (got an empty one)"));
  }
  // Megatron's interleaved schedule's flags with one of this program's schedules.
  for (absl::string_view flag :
       {flag_name(&A::microbatch_group_size_per_vp_stage), flag_name(&A::overlap_p2p_comm_warmup_flush)}) {
    if (a.was_given(std::string(flag)) &&
        (schedule == PipelineScheduleFlag::kZeroBubbleH1 || schedule == PipelineScheduleFlag::kZeroBubbleV ||
         schedule == PipelineScheduleFlag::kAuto)) {
      return invalid(absl::StrCat(flag, " belongs to Megatron's interleaved schedule; ",
                                  flag_name(&A::pipeline_schedule), " ", a.pipeline_schedule,
                                  " runs another: drop one of the two"));
    }
  }
  return absl::OkStatus();
}

absl::Status validate_schedule_for_layout(const Arguments& a, int p, int layers_per_virtual_stage, int microbatches) {
  const PipelineScheduleFlag schedule = pipeline_schedule_flag(a);
  const bool zero_bubble_v = schedule == PipelineScheduleFlag::kZeroBubbleV;
  // The layer counts of an uneven split (or one counting the embedding / the loss) were checked by
  // validate_pipeline_split; the schedule's rules are those of its p x v chunks, as if one layer each.
  int num_layers = static_cast<int>(a.num_layers);
  if (custom_pipeline_split(a)) {
    const int v = virtual_pipeline_size(a);
    if (zero_bubble_v) {
      return invalid(
          absl::StrCat(flag_name(&A::pipeline_schedule),
                       " zb-v places two chunks per rank in a V, where Megatron's uneven split "
                       "(--decoder-first/last-pipeline-num-layers, --account-for-embedding/loss-in-pipeline-split) "
                       "has no meaning; use 1f1b or interleaved"));
    }
    if (static_cast<int64_t>(p) * v > std::numeric_limits<int>::max()) {
      return invalid(absl::StrCat("pipeline layout: ", flag_name(&A::pipeline_model_parallel_size),
                                  " x model chunks per rank is too large"));
    }
    num_layers = p * v;
    layers_per_virtual_stage = v > 1 ? 1 : 0;
  }
  // auto chooses among the schedules of the layout's chunks (train/schedule_choice.h): with two
  // chunks per rank ZB-V runs any number of microbatches, so the interleaved rule on m is only
  // checked where no other schedule can run.
  const bool automatic = schedule == PipelineScheduleFlag::kAuto;
  const absl::StatusOr<int> chunks = pipeline::virtual_pipeline_size(num_layers, p, layers_per_virtual_stage);
  const bool v_possible = automatic && p > 1 && chunks.ok() && *chunks == 2 && !custom_pipeline_split(a);
  if (zero_bubble_v) {
    // ZB-V: two chunks per rank in a V; any number of microbatches (no interleaving rule on m).
    GPT_RETURN_IF_ERROR(chunks.status());
    if (p < 2) {
      return invalid(absl::StrCat(flag_name(&A::pipeline_schedule),
                                  " zb-v runs two model chunks per pipeline rank placed in a V: it needs ",
                                  flag_name(&A::pipeline_model_parallel_size), " > 1"));
    }
    if (virtual_pipeline_size(a) != 2) {
      return invalid(absl::StrCat(
          flag_name(&A::pipeline_schedule), " zb-v runs two model chunks per pipeline rank placed in a V: give ",
          flag_name(&A::num_layers_per_virtual_pipeline_stage), " = ", flag_name(&A::num_layers), " / (2 x ",
          flag_name(&A::pipeline_model_parallel_size), ") or ", flag_name(&A::num_virtual_stages_per_pipeline_rank),
          " 2 (", virtual_pipeline_size(a), " chunks per rank here)"));
    }
  } else if (!v_possible) {
    // A group larger than any number of microbatches is refused by the range rule all the same.
    const int group = static_cast<int>(std::min<int64_t>(a.microbatch_group_size_per_vp_stage, kIntMax));
    GPT_RETURN_IF_ERROR(pipeline::validate_pipeline_layout(num_layers, p, layers_per_virtual_stage,
                                                           microbatches, group));
  }
  if (a.overlap_p2p_comm_warmup_flush && chunks.ok() && *chunks == 1) {
    // Megatron turns overlap_p2p_comm off without interleaving, and ModelParallelConfig then
    // raises this.
    return invalid(absl::StrCat(flag_name(&A::overlap_p2p_comm_warmup_flush),
                                ": pipeline parallel communication overlapping in warmup and flush is "
                                "only compatible with overlap_p2p_comm (the interleaved schedule: give ",
                                flag_name(&A::num_layers_per_virtual_pipeline_stage), " or ",
                                flag_name(&A::num_virtual_stages_per_pipeline_rank), " with ",
                                flag_name(&A::pipeline_model_parallel_size), " > 1)"));
  }
  // The schedule the layout runs: 1f1b and zb-h1 run one model chunk per rank, interleaved more.
  if (!a.pipeline_schedule.empty() && !zero_bubble_v && !automatic) {
    const int v = virtual_pipeline_size(a);
    if (v > 1 && schedule != PipelineScheduleFlag::kInterleaved) {
      return invalid(absl::StrCat(flag_name(&A::pipeline_schedule), " ", a.pipeline_schedule,
                                  " runs one model chunk per pipeline rank; drop ",
                                  flag_name(&A::num_layers_per_virtual_pipeline_stage), " / ",
                                  flag_name(&A::num_virtual_stages_per_pipeline_rank), " (", v,
                                  " chunks per rank here) or use ", flag_name(&A::pipeline_schedule), " interleaved"));
    }
    if (v == 1 && schedule == PipelineScheduleFlag::kInterleaved) {
      return invalid(absl::StrCat(flag_name(&A::pipeline_schedule),
                                  " interleaved needs more than one model chunk per pipeline rank: give ",
                                  flag_name(&A::num_layers_per_virtual_pipeline_stage), " or ",
                                  flag_name(&A::num_virtual_stages_per_pipeline_rank), " (with ",
                                  flag_name(&A::pipeline_model_parallel_size), " > 1)"));
    }
  }
  return absl::OkStatus();
}

}  // namespace gpt
