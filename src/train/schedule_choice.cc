#include "train/schedule_choice.h"

#include <algorithm>
#include <cmath>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "model/recompute_plan.h"
#include "train/pipeline_split.h"
#include "train/args/sharding_arguments.h"
#include "train/configs.h"

namespace gpt {

using pipeline::ScheduleKind;

std::vector<ScheduleKind> schedule_candidates(int p, int v, int m, bool deferred_weight_gradients) {
  if (p == 1) return {ScheduleKind::kOneFOneB};
  if (v == 1) {
    if (!deferred_weight_gradients) return {ScheduleKind::kOneFOneB};
    return {ScheduleKind::kOneFOneB, ScheduleKind::kZeroBubbleH1};
  }
  std::vector<ScheduleKind> kinds;
  if (m % p == 0) kinds.push_back(ScheduleKind::kInterleaved);
  if (v == 2 && deferred_weight_gradients) kinds.push_back(ScheduleKind::kZeroBubbleV);
  return kinds;
}

StageCosts stage_costs_from_flops(const Arguments& a, int64_t vocab_size) {
  const ModelConfig config = model_config_from(a);
  const double b = static_cast<double>(a.micro_batch_size), s = static_cast<double>(a.seq_length);
  const double h = static_cast<double>(a.hidden_size);
  const double heads = static_cast<double>(config.num_attention_heads);
  const double groups = static_cast<double>(config.query_groups());
  const double projection = static_cast<double>(config.attention_projection_size()) / h;  // heads d / h
  const double mlp = (config.swiglu ? 1.5 : 1.0) * static_cast<double>(config.ffn_hidden_size) / h;
  const double unit = 4.0 * b * s * h * h;
  const double layer_forward = unit * ((1.0 + groups / heads + s / h) * projection + mlp);
  const double layer_weight = unit * ((1.0 + groups / heads) * projection + mlp);
  const double attention_core = unit * (s / h) * projection;
  const absl::StatusOr<int64_t> padded = checked_padded_vocab_size(a, vocab_size);
  const double head = 2.0 * b * s * h * static_cast<double>(padded.ok() ? *padded : vocab_size);

  const int p = static_cast<int>(a.pipeline_model_parallel_size), v = virtual_pipeline_size(a);
  const int stages = p * v;
  // Each virtual stage's layers (train/pipeline_split.h: even, or Megatron's uneven split).
  const std::vector<int64_t> stage_layers = virtual_stage_layers(a);
  const bool selective = config.recompute.granularity == RecomputeGranularity::kSelective;
  StageCosts costs;
  costs.source = "FLOP counts per pass (Megatron's formula split into F, B and W)";
  for (int k = 0; k < stages; ++k) {
    const int64_t chunk_layers = stage_layers[static_cast<size_t>(k)];
    int64_t recomputed = 0;  // layers of the chunk whose forward runs again in its backward
    for (const LayerRecompute& layer : plan_recompute(config.recompute, chunk_layers).layers) {
      if (layer.stashing == LayerStashing::kGroupInput) ++recomputed;
    }
    const double layers = static_cast<double>(chunk_layers);
    double forward = layers * layer_forward, weight = layers * layer_weight;
    double backward_input = 2.0 * forward - weight + static_cast<double>(recomputed) * layer_forward +
                            (selective ? layers * attention_core : 0.0);
    if (k == stages - 1) {
      forward += head;
      weight += head;
      backward_input += head;
    }
    costs.forward.push_back(forward);
    costs.backward_input.push_back(backward_input);
    costs.weight.push_back(weight);
  }
  return costs;
}

pipeline::Costs placed_costs(const StageCosts& costs, pipeline::Placement placement, int p, int v) {
  pipeline::Costs placed;
  placed.forward.assign(static_cast<size_t>(p), std::vector<double>(static_cast<size_t>(v), 0.0));
  placed.backward = placed.weight = placed.forward;
  for (int r = 0; r < p; ++r) {
    for (int c = 0; c < v; ++c) {
      const size_t k = static_cast<size_t>(pipeline::virtual_stage(placement, p, r, c));
      const size_t rr = static_cast<size_t>(r), cc = static_cast<size_t>(c);
      placed.forward[rr][cc] = costs.forward[k];
      placed.backward[rr][cc] = costs.backward_input[k] + costs.weight[k];
      placed.weight[rr][cc] = costs.weight[k];
    }
  }
  return placed;
}

absl::StatusOr<ScheduleChoice> choose_schedule(const Arguments& args, int64_t world_size, int64_t vocab_size,
                                               const StageCosts& costs, const MemoryBudget& budget) {
  const int p = static_cast<int>(args.pipeline_model_parallel_size), v = virtual_pipeline_size(args);
  const int m = static_cast<int>(num_microbatches(args, world_size));
  const size_t stages = static_cast<size_t>(p) * static_cast<size_t>(v);
  if (costs.forward.size() != stages || costs.backward_input.size() != stages || costs.weight.size() != stages) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline costs (", costs.source, ") for ", costs.forward.size(),
                                                   " virtual stages; the layout has ", stages));
  }
  ScheduleChoice choice;
  const bool deferred_weight_gradients = zero_level(args) < ZeroLevel::kGradients;
  std::vector<ScheduleKind> kinds = schedule_candidates(p, v, m, deferred_weight_gradients);
  // Megatron's uneven split is by pipeline rank in the interleaved order: no V placement.
  if (custom_pipeline_split(args)) std::erase(kinds, ScheduleKind::kZeroBubbleV);
  if (kinds.empty()) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--pipeline-schedule auto: two model chunks per pipeline rank run interleaved only with a number of "
        "microbatches (", m, ") that is a multiple of --pipeline-model-parallel-size (", p, "), and ZB-V defers weight "
        "gradients, which --data-parallel-sharding-strategy ", args.data_parallel_sharding_strategy,
        " cannot hold; change the global batch size or the sharding strategy"));
  }
  for (ScheduleKind kind : kinds) {
    ScheduleCandidate candidate{.kind = kind};
    GPT_ASSIGN_OR_RETURN(const pipeline::Schedule schedule, pipeline::make_schedule(kind, p, v, m));
    GPT_ASSIGN_OR_RETURN(
        const pipeline::SimulationReport report,
        pipeline::simulate(schedule, placed_costs(costs, pipeline::schedule_placement(kind), p, v)));
    candidate.makespan = report.makespan;
    candidate.bubble = report.bubble_fraction;
    Arguments with_kind = args;
    with_kind.pipeline_schedule = pipeline::to_string(kind);
    GPT_ASSIGN_OR_RETURN(const MemoryPlan plan, plan_memory(with_kind, world_size, vocab_size));
    candidate.memory_bytes = plan.total_bytes();
    const absl::Status fits = check_memory_plan(plan, with_kind, budget);
    candidate.fits = fits.ok();
    if (!fits.ok()) candidate.refusal = std::string(fits.message());
    choice.candidates.push_back(std::move(candidate));
  }
  const ScheduleCandidate* best = nullptr;
  for (const ScheduleCandidate& candidate : choice.candidates) {
    if (!candidate.fits) continue;
    if (best == nullptr || candidate.makespan < best->makespan * (1.0 - 1e-9)) best = &candidate;
  }
  const bool none_fits = best == nullptr;
  if (none_fits) best = &choice.candidates.front();
  choice.kind = best->kind;
  const double reference = choice.candidates.front().makespan;
  choice.explanation = absl::StrCat(
      "--pipeline-schedule auto: ", pipeline::to_string(choice.kind),
      none_fits ? " (Megatron's for the layout: no schedule's memory plan fits)"
                : (choice.candidates.size() == 1 ? " (the only schedule of the layout's chunks)"
                                                 : ", the fastest simulated schedule whose memory plan fits"),
      "; costs: ", costs.source, "\n");
  for (const ScheduleCandidate& c : choice.candidates) {
    absl::StrAppend(&choice.explanation,
                    absl::StrFormat("  %-12s forward-backward %.4f of %s's, bubble %.4f, memory %s per rank%s%s\n",
                                    pipeline::to_string(c.kind), reference > 0 ? c.makespan / reference : 1.0,
                                    pipeline::to_string(choice.candidates.front().kind), c.bubble,
                                    format_bytes(c.memory_bytes), c.fits ? "" : ": does not fit",
                                    &c == best ? "  <- chosen" : ""));
  }
  return choice;
}

}  // namespace gpt
