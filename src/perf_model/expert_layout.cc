#include "perf_model/expert_layout.h"

#include <algorithm>

#include "absl/strings/str_cat.h"
#include "core/checked_math.h"
#include "perf_model/moe_ops.h"
#include "train/pipeline_split.h"

namespace gpt::perf {
namespace {

constexpr const char* kEp = "--expert-model-parallel-size";
constexpr const char* kEtp = "--expert-tensor-parallel-size";

int64_t resolved_etp(const Arguments& a) {
  return a.was_given(kEtp) && a.expert_tensor_parallel_size > 0 ? a.expert_tensor_parallel_size
                                                                : a.tensor_model_parallel_size;
}

}  // namespace

ExpertGrid expert_grid(const Arguments& a, int64_t world) {
  ExpertGrid grid;
  grid.moe = a.num_experts > 0;
  if (!grid.moe) {
    grid.expert_tensor = a.tensor_model_parallel_size;
  } else {
    grid.expert_model = std::max<int64_t>(1, a.expert_model_parallel_size);
    grid.expert_tensor = std::max<int64_t>(1, resolved_etp(a));
  }
  const int64_t cells = grid.expert_model * grid.expert_tensor * std::max<int64_t>(1, a.pipeline_model_parallel_size);
  grid.expert_data = cells > 0 && world % cells == 0 ? world / cells : 1;
  return grid;
}

absl::Status check_expert_grid(const Arguments& a, int64_t world) {
  if (a.num_experts <= 0) return absl::OkStatus();
  const int64_t ep = a.expert_model_parallel_size, etp = resolved_etp(a), pp = a.pipeline_model_parallel_size;
  if (ep < 1) return absl::InvalidArgumentError(absl::StrCat(kEp, " must be at least 1 (got ", ep, ")"));
  if (a.was_given(kEtp) && a.expert_tensor_parallel_size < 1) {
    return absl::InvalidArgumentError(
        absl::StrCat(kEtp, " must be at least 1 (got ", a.expert_tensor_parallel_size, ")"));
  }
  if (a.num_experts % ep != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--num-experts (", a.num_experts, ") must be divisible by ", kEp,
                                                   " (", ep, "): each expert-parallel rank holds E / EP experts"));
  }
  const int64_t ffn = a.moe_ffn_hidden_size > 0 ? a.moe_ffn_hidden_size : a.ffn_hidden_size;
  if (ffn > 0 && ffn % etp != 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("the experts' ffn size (", ffn, ") must be divisible by ", kEtp, " (", etp, ")"));
  }
  const int64_t cells = checked_multiply(checked_multiply(etp, ep).value_or(0), pp).value_or(0);
  if (cells == 0 || world % cells != 0) {
    return absl::InvalidArgumentError(absl::StrCat("world size (", world, ") must be divisible by ", kEtp, " (", etp,
                                                   ") x ", kEp, " (", ep, ") x --pipeline-model-parallel-size (", pp,
                                                   "), as Megatron's expert grid"));
  }
  // Megatron: "When not using pp-last rank ordering, the data parallel size of the attention and
  // moe layers must be the same".
  const int64_t dp = data_parallel_size(a, world) * a.context_parallel_size;
  if (a.use_tp_pp_dp_mapping && pp > 1 && world / cells != dp) {
    return absl::InvalidArgumentError(absl::StrCat(
        kEtp, " ", etp, " x ", kEp, " ", ep, " with --use-tp-pp-dp-mapping and --pipeline-model-parallel-size ", pp,
        ": the expert data-parallel size (", world / cells, ") must equal the data x context size (", dp, ")"));
  }
  return absl::OkStatus();
}

Arguments without_expert_grid(Arguments a) {
  if (a.num_experts <= 0) return a;
  a.expert_model_parallel_size = 1;
  a.expert_tensor_parallel_size = 0;
  a.given.erase(kEtp);
  a.given.erase(kEp);
  return a;
}

Arguments with_expert_grid(Arguments validated, const Arguments& given) {
  if (given.num_experts <= 0) return validated;
  validated.expert_model_parallel_size = given.expert_model_parallel_size;
  validated.expert_tensor_parallel_size = given.expert_tensor_parallel_size;
  if (given.was_given(kEp)) validated.given.insert(kEp);
  if (given.was_given(kEtp)) validated.given.insert(kEtp);
  return validated;
}

ExpertElements expert_elements(const Arguments& a, const ModelConfig& config, int64_t world) {
  if (!config.moe.enabled()) return {};
  const ExpertGrid grid = expert_grid(a, world);
  const double layers =
      static_cast<double>(rank_moe_layers(config, virtual_stage_layers(a), a.pipeline_model_parallel_size));
  return {.planned = layers * expert_parameters_per_rank(config, 1, a.tensor_model_parallel_size),
          .actual = layers * expert_parameters_per_rank(config, grid.expert_model, grid.expert_tensor)};
}

int64_t rank_moe_layers(const ModelConfig& config, const std::vector<int64_t>& stage_layers, int64_t pipeline) {
  if (!config.moe.enabled() || pipeline <= 0) return 0;
  std::vector<int64_t> per_rank(static_cast<size_t>(pipeline), 0);
  int64_t layer = 0;
  for (size_t stage = 0; stage < stage_layers.size(); ++stage) {
    for (int64_t i = 0; i < stage_layers[stage]; ++i, ++layer) {
      if (config.moe.is_moe_layer(layer)) ++per_rank[stage % static_cast<size_t>(pipeline)];
    }
  }
  return *std::max_element(per_rank.begin(), per_rank.end());
}

}  // namespace gpt::perf
