#include "train/args/collective_order_arguments.h"

#include <algorithm>
#include <vector>

#include "absl/strings/str_cat.h"
#include "parallel/pipeline/collective_check.h"
#include "train/args/flag_enums.h"
#include "train/args/flag_table.h"
#include "train/args/moe_layer_pattern.h"
#include "train/args/sharding_arguments.h"
#include "train/pipeline_split.h"
#include "train/schedule_choice.h"

namespace gpt {
namespace {

// The model as the collective program sees it: each virtual stage's layers, MoE or dense.
pipeline::ModelLayout model_layout(const Arguments& a, const std::vector<bool>& moe) {
  pipeline::ModelLayout model;
  int64_t layer = 0;
  for (int64_t count : virtual_stage_layers(a)) {
    std::vector<bool> stage;
    for (int64_t l = 0; l < count; ++l) stage.push_back(moe[static_cast<size_t>(layer++)]);
    model.stage_moe.push_back(std::move(stage));
  }
  model.dispatcher = token_dispatcher(a) == TokenDispatcher::kAlltoall ? pipeline::Dispatcher::kAllToAll
                                                                       : pipeline::Dispatcher::kAllGather;
  const ZeroLevel zero = zero_level(a);
  model.reduction = zero >= ZeroLevel::kGradients ? pipeline::GradientReduction::kEveryMicrobatch
                    : a.overlap_grad_reduce       ? pipeline::GradientReduction::kOverlapped
                                                  : pipeline::GradientReduction::kAfterBackward;
  model.gather_parameters = zero >= ZeroLevel::kParameters;
  if (zero == ZeroLevel::kOptimizer || zero == ZeroLevel::kGradients) {
    model.updated_shards =
        a.overlap_param_gather ? pipeline::UpdatedShards::kInFirstForward : pipeline::UpdatedShards::kAfterStep;
  }
  // configs.cc's shard plan: with --overlap-grad-reduce only the first pipeline rank's buckets have
  // a size (Megatron's DDP); the other ranks' parameters are one bucket.
  model.chunk_buckets_after_first_rank = a.overlap_grad_reduce && !a.use_megatron_fsdp && !a.use_torch_fsdp2;
  model.tied_embedding = !a.untie_embeddings_and_output_weights;
  return model;
}

}  // namespace

absl::Status validate_collective_order(const Arguments& a, int64_t world_size, int microbatches) {
  if (a.num_experts == 0) return absl::OkStatus();
  // moe_arguments refuses a bad pattern; nothing to prove without one.
  absl::StatusOr<std::vector<bool>> moe = moe_layer_pattern(a.moe_layer_freq, a.num_layers);
  if (!moe.ok()) return absl::OkStatus();
  const int p = static_cast<int>(a.pipeline_model_parallel_size);
  const int v = virtual_pipeline_size(a);
  pipeline::GridLayout grid;
  grid.tensor = static_cast<int>(a.tensor_model_parallel_size);
  grid.context = static_cast<int>(a.context_parallel_size);
  grid.pipeline = p;
  grid.data = static_cast<int>(data_parallel_size(a, world_size));
  grid.expert_model = static_cast<int>(a.expert_model_parallel_size);
  grid.expert_tensor = a.expert_tensor_parallel_size >= 1 ? static_cast<int>(a.expert_tensor_parallel_size) : 0;
  grid.tp_pp_dp = a.use_tp_pp_dp_mapping;
  const int64_t calls = world_size * microbatches * v * (a.num_layers / (int64_t{p} * v) + 2) * 12;
  if (calls > kCollectiveOrderBudget) return absl::OkStatus();
  const pipeline::ModelLayout model = model_layout(a, *moe);
  // auto may run any of its candidates.
  std::vector<pipeline::ScheduleKind> kinds;
  if (pipeline_schedule_flag(a) == PipelineScheduleFlag::kAuto) {
    kinds = schedule_candidates(p, v, microbatches, zero_level(a) < ZeroLevel::kGradients);
  } else {
    kinds.push_back(pipeline_schedule_kind(a));
  }
  const int group = static_cast<int>(std::min<int64_t>(a.microbatch_group_size_per_vp_stage, microbatches));
  for (pipeline::ScheduleKind kind : kinds) {
    absl::StatusOr<pipeline::Schedule> schedule = pipeline::make_schedule(kind, p, v, microbatches, group);
    if (!schedule.ok()) continue;  // the layout rules refused what it cannot run
    if (absl::Status status = pipeline::check_collective_order(grid, *schedule, model); !status.ok()) {
      return absl::InvalidArgumentError(absl::StrCat(flag_name(&Arguments::expert_model_parallel_size), " ",
                                                     grid.expert_model, " with the ", pipeline::to_string(kind),
                                                     " schedule: ", status.message()));
    }
  }
  return absl::OkStatus();
}

}  // namespace gpt
