#include "perf_model/search.h"

#include <algorithm>
#include <chrono>
#include <cstdio>

#include "absl/strings/str_cat.h"
#include "core/checked_math.h"
#include "train/args/flag_enums.h"
#include "train/schedule_choice.h"

namespace gpt::perf {
namespace {

// Flags a candidate sets; the base's values are dropped.
const char* const kLayoutFlags[] = {"--tensor-model-parallel-size",
                                    "--pipeline-model-parallel-size",
                                    "--num-layers-per-virtual-pipeline-stage",
                                    "--num-virtual-stages-per-pipeline-rank",
                                    "--sequence-parallel",
                                    "--use-distributed-optimizer",
                                    "--use-megatron-fsdp",
                                    "--data-parallel-sharding-strategy",
                                    "--micro-batch-size",
                                    "--recompute-granularity",
                                    "--recompute-method",
                                    "--recompute-num-layers",
                                    "--recompute-activations",
                                    "--context-parallel-size",
                                    "--cp-comm-type",
                                    "--optimizer-cpu-offload",
                                    "--optimizer-offload-fraction",
                                    "--use-precision-aware-optimizer",
                                    "--decoder-first-pipeline-num-layers",
                                    "--decoder-last-pipeline-num-layers",
                                    "--expert-model-parallel-size",
                                    "--expert-tensor-parallel-size"};

struct Candidate {
  int64_t tp, pp, layers_per_virtual_stage, micro_batch;
  bool sp;
  int zero;  // ZeRO level: 0, 1 (--use-distributed-optimizer), 2 / 3 (Megatron-FSDP's optim_grads / optim_grads_params)
  int recompute;  // 0 none, 1 selective, 2 full uniform 1
  int64_t cp = 1;
  bool all_to_all = false;  // --cp-comm-type a2a (else p2p)
  bool offload = false;     // --optimizer-cpu-offload (fraction 1) with --use-precision-aware-optimizer
  // PP not dividing the layers: Megatron's first / last stage layers (most_even_split) and the
  // chunks per rank (--num-virtual-stages-per-pipeline-rank, which such a split needs for v > 1).
  int64_t first_layers = 0, last_layers = 0, virtual_chunks = 1;
  // MoE: the expert grid's EP and ETP (0: not given, i.e. TP).
  int64_t ep = 1, etp = 0;
};

// MoE: the expert grids tried with a TP x PP: EP each divisor of the experts, ETP 1 (Megatron's
// MoE Parallel Folding) and TP (its default), where ETP x EP x PP divides the world; an EP or
// ETP the base gives is kept (which narrows the search). A dense model: none (EP 1, ETP not given).
std::vector<std::pair<int64_t, int64_t>> expert_options(const Arguments& base, int64_t world, int64_t tp, int64_t pp) {
  if (base.num_experts <= 0) return {{1, 0}};
  const bool fixed_ep = base.was_given("--expert-model-parallel-size");
  const bool fixed_etp = base.was_given("--expert-tensor-parallel-size");
  std::vector<int64_t> tensor_options = {1};
  if (tp > 1) tensor_options.push_back(tp);
  if (fixed_etp) tensor_options = {base.expert_tensor_parallel_size};
  std::vector<std::pair<int64_t, int64_t>> options;
  for (int64_t ep = 1; ep <= base.num_experts && ep <= world; ++ep) {
    if (base.num_experts % ep != 0 || (fixed_ep && ep != base.expert_model_parallel_size)) continue;
    for (int64_t etp : tensor_options) {
      if (etp >= 1 && world % (etp * ep * pp) == 0) options.push_back({ep, etp});
    }
  }
  return options;
}

Arguments with_layout(const Arguments& base, const Candidate& c) {
  Arguments a = base;
  for (const char* flag : kLayoutFlags) a.given.erase(flag);
  auto set = [&](const char* flag) { a.given.insert(flag); };
  a.tensor_model_parallel_size = c.tp;
  a.pipeline_model_parallel_size = c.pp;
  a.num_layers_per_virtual_pipeline_stage = c.layers_per_virtual_stage;
  a.num_virtual_stages_per_pipeline_rank = c.virtual_chunks > 1 ? c.virtual_chunks : 0;
  a.decoder_first_pipeline_num_layers = c.first_layers;
  a.decoder_last_pipeline_num_layers = c.last_layers;
  if (c.first_layers > 0) {
    set("--decoder-first-pipeline-num-layers");
    set("--decoder-last-pipeline-num-layers");
  }
  if (c.virtual_chunks > 1) set("--num-virtual-stages-per-pipeline-rank");
  a.micro_batch_size = c.micro_batch;
  a.expert_model_parallel_size = c.ep;
  a.expert_tensor_parallel_size = c.etp;
  if (c.ep > 1) set("--expert-model-parallel-size");
  if (c.etp > 0) set("--expert-tensor-parallel-size");
  a.sequence_parallel = c.sp;
  a.use_distributed_optimizer = c.zero == 1;
  a.use_megatron_fsdp = c.zero >= 2;
  a.data_parallel_sharding_strategy = c.zero == 2 ? "optim_grads" : "optim_grads_params";
  a.optimizer_cpu_offload = c.offload;
  a.optimizer_offload_fraction = 1.0;
  a.use_precision_aware_optimizer = c.offload;
  if (c.offload) {
    set("--optimizer-cpu-offload");
    set("--use-precision-aware-optimizer");
  }
  if (c.zero == 0) a.overlap_param_gather = false;  // it overlaps the distributed optimizer's gather
  a.recompute_activations = false;
  a.recompute_granularity = c.recompute == 0 ? "" : c.recompute == 1 ? "selective" : "full";
  a.recompute_method = c.recompute == 2 ? "uniform" : "";
  a.recompute_num_layers = c.recompute == 2 ? 1 : 0;
  a.context_parallel_size = c.cp;
  a.cp_comm_type = {std::string(enum_name(c.all_to_all ? ContextCommType::kAllToAll : ContextCommType::kRing))};
  // The search tries p2p and a2a: a2a+p2p's levels (for the given CP) do not carry over.
  a.hierarchical_context_parallel_sizes.clear();
  a.given.erase("--hierarchical-context-parallel-sizes");
  if (c.cp > 1) {
    set("--context-parallel-size");
    set("--cp-comm-type");
  }
  set("--tensor-model-parallel-size");
  set("--pipeline-model-parallel-size");
  set("--micro-batch-size");
  if (c.layers_per_virtual_stage > 0) set("--num-layers-per-virtual-pipeline-stage");
  if (c.sp) set("--sequence-parallel");
  if (c.zero == 1) set("--use-distributed-optimizer");
  if (c.zero >= 2) {
    set("--use-megatron-fsdp");
    set("--data-parallel-sharding-strategy");
  }
  if (c.recompute > 0) set("--recompute-granularity");
  if (c.recompute == 2) {
    set("--recompute-method");
    set("--recompute-num-layers");
  }
  return a;
}

// The search's work, counted before any of it is done: the candidate layouts, and the schedule
// steps their simulations take (p x v x m per schedule, at most two schedules per layout). Above
// either limit the search is refused with the figures; narrow it with a smaller --world-size or a
// smaller --global-batch-size, or predict one layout without --search.
constexpr int64_t kMaxSearchCandidates = 200000;
constexpr int64_t kMaxSearchScheduleSteps = int64_t{1} << 28;
constexpr int64_t kMaxEnumeration = int64_t{1} << 24;  // pipeline and virtual-stage sizes tried

absl::Status check_search_size(const Arguments& base, int64_t world, const std::vector<Candidate>& candidates) {
  CheckedBytes steps = 0;
  for (const Candidate& c : candidates) {
    const int64_t dp = world / (c.tp * c.pp * c.cp);
    const int64_t microbatches = std::max<int64_t>(1, base.global_batch_size / std::max<int64_t>(1, c.micro_batch * dp));
    const int64_t chunks =
        c.layers_per_virtual_stage > 0 ? base.num_layers / (c.pp * c.layers_per_virtual_stage) : c.virtual_chunks;
    steps = steps + CheckedBytes(2) * c.pp * chunks * microbatches * 3;  // F, B and W steps
  }
  const int64_t count = static_cast<int64_t>(candidates.size());
  if (count > kMaxSearchCandidates || !steps.value() || *steps.value() > kMaxSearchScheduleSteps) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--search on --world-size ", world, " with ", base.num_layers, " layers and --global-batch-size ",
        base.global_batch_size, " would evaluate ", count, " candidate layouts simulating ",
        steps.value() ? absl::StrCat(*steps.value()) : std::string("more than 2^63"),
        " schedule steps: more than the search's limits (", kMaxSearchCandidates, " layouts, ",
        kMaxSearchScheduleSteps, " steps); predict chosen layouts without --search, or search a smaller world or batch",
        base.num_experts > 0 && !base.was_given("--expert-model-parallel-size")
            ? ", or give --expert-model-parallel-size (and --expert-tensor-parallel-size) to try fewer expert grids"
            : ""));
  }
  return absl::OkStatus();
}

// The layouts of one TP x CP x PP: each chunk count, micro batch, SP, ZeRO level and recompute.
// `split`: the uneven first / last stage layers (0: PP divides the layers).
void add_pipeline_layouts(const Arguments& base, int64_t tp, int64_t cp, int64_t pp, int64_t dp, const UnevenSplit& split,
                          std::pair<int64_t, int64_t> expert, std::vector<Candidate>& candidates, int64_t& enumerated) {
  // Chunks per rank: --num-layers-per-virtual-pipeline-stage with the even split (0, 1: none);
  // with the uneven one --num-virtual-stages-per-pipeline-rank, every count dividing each stage's
  // layers (Megatron's rule).
  std::vector<std::pair<int64_t, int64_t>> virtual_options = {{0, 1}};
  if (split.first == 0) {
    const int64_t stage_layers = base.num_layers / pp;
    for (int64_t v = 2; pp > 1 && v <= stage_layers; ++v) {
      if (++enumerated > kMaxEnumeration) return;
      if (stage_layers % v == 0) virtual_options.push_back({stage_layers / v, 1});
    }
  } else {
    for (int64_t v = 2; v <= std::min(split.first, split.last); ++v) {
      if (++enumerated > kMaxEnumeration) return;
      const bool middle = pp <= 2 || split.middle % v == 0;
      if (split.first % v == 0 && split.last % v == 0 && middle) virtual_options.push_back({0, v});
    }
  }
  for (const auto& [lpvs, chunks] : virtual_options) {  // (layers per virtual stage, chunks per rank)
    for (int64_t mbs = 1; mbs <= 8; mbs *= 2) {
      if (mbs * dp > base.global_batch_size) break;
      for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
        for (int zero = 0; zero <= (dp * cp > 1 ? 3 : 0); ++zero) {
          for (int recompute = 0; recompute <= 2; ++recompute) {
            if (static_cast<int64_t>(candidates.size()) > kMaxSearchCandidates) return;
            Candidate c{tp, pp, lpvs, mbs, sp == 1, zero, recompute, cp, false};
            c.first_layers = split.first, c.last_layers = split.last, c.virtual_chunks = chunks;
            c.ep = expert.first, c.etp = expert.second;
            candidates.push_back(c);
          }
        }
      }
    }
  }
}

}  // namespace

UnevenSplit most_even_split(int64_t layers, int64_t pp) {
  if (pp < 2 || layers < pp || layers % pp == 0) return {};
  if (pp == 2) return {.first = (layers + 1) / 2, .middle = 0, .last = layers / 2};
  UnevenSplit best;
  int64_t best_max = layers + 1;
  for (int64_t middle = 1; middle * (pp - 2) + 2 <= layers; ++middle) {
    const int64_t ends = layers - middle * (pp - 2);
    const int64_t first = (ends + 1) / 2, last = ends / 2;
    const int64_t largest = std::max({first, middle, last});
    // Ties go to the larger middle: the end stages also run the embedding and the LM head.
    if (largest <= best_max) best = {.first = first, .middle = middle, .last = last}, best_max = largest;
  }
  return best;
}

absl::StatusOr<SearchResult> search_layouts(const Arguments& base, int64_t world, const Cluster& cluster,
                                            const RunOptions& options, int top) {
  if (!base.was_given("--global-batch-size")) {
    return absl::InvalidArgumentError("--search needs --global-batch-size (the batch every layout trains)");
  }
  if (world <= 0) return absl::InvalidArgumentError(absl::StrCat("--world-size must be positive (got ", world, ")"));
  if (base.num_layers <= 0) return absl::InvalidArgumentError("missing required flag --num-layers");
  std::vector<Candidate> candidates;
  // Context parallelism: CP 1, 2, 4 and 8 where the sequence's 2 CP chunks allow, with the ring
  // (p2p; predict models a2a too, for a layout given). Layouts pretrain_gpt refuses are dropped.
  std::vector<int64_t> context_options = {1};
  for (int64_t cp = 2; cp <= 8 && cp <= world && base.seq_length % (2 * cp) == 0; cp *= 2) {
    context_options.push_back(cp);
  }
  // Every TP x PP x DP x microbatch x SP x ZeRO x recompute layout with `cp` context-parallel ranks;
  // the sizes tried are counted, and the enumeration stops past its limits (refused below).
  int64_t enumerated = 0;
  auto add_layouts = [&](int64_t cp) {
    for (int64_t tp = 1; tp <= cluster.gpus_per_node && tp * cp <= world; tp *= 2) {
      if (world % (tp * cp) != 0) continue;
      for (int64_t pp = 1; pp <= base.num_layers && tp * cp * pp <= world; ++pp) {
        if (++enumerated > kMaxEnumeration) return;
        if (world % (tp * cp * pp) != 0) continue;
        // PP not dividing the layers: Megatron's first / last stage layers, the most even split.
        const UnevenSplit split = most_even_split(base.num_layers, pp);
        if (base.num_layers % pp != 0 && split.first == 0) continue;
        for (const auto& expert : expert_options(base, world, tp, pp)) {
          add_pipeline_layouts(base, tp, cp, pp, world / (tp * cp * pp), split, expert, candidates, enumerated);
        }
      }
    }
  };
  for (const int64_t cp : context_options) add_layouts(cp);
  if (enumerated > kMaxEnumeration) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--search on --world-size ", world, " with ", base.num_layers, " layers: more than ", kMaxEnumeration,
        " pipeline and virtual-stage sizes to try, more than the search enumerates; predict chosen layouts without "
        "--search, or search a smaller world"));
  }
  GPT_RETURN_IF_ERROR(check_search_size(base, world, candidates));
  SearchResult result;
  const auto started = std::chrono::steady_clock::now();
  auto last_report = started;
  std::vector<Prediction> fitting;
  // Optimizer offload only saves memory and costs time: it is tried for a sharded layout that does
  // not fit without it, when the cluster describes its host (host link and host AdamW rate).
  const bool can_offload = cluster.host_link_bandwidth > 0 && cluster.host_adamw_bandwidth > 0;
  for (size_t i = 0; i < candidates.size(); ++i) {
    // A long search says how far it is (stderr, every 10 s; stdout stays the table or the JSON).
    const auto now = std::chrono::steady_clock::now();
    if (now - last_report >= std::chrono::seconds(10)) {
      last_report = now;
      std::fprintf(stderr, "perf_model --search: %zu of %zu candidate layouts evaluated (%.0f s)\n", i,
                   candidates.size(), std::chrono::duration<double>(now - started).count());
    }
    const Candidate c = candidates[i];
    bool any_fits = false, any_valid = false;
    // Each pipeline schedule the layout's chunks can run (1F1B / ZB-H1, interleaved / ZB-V): its
    // own time and memory (ZB-H1 holds more on the later stages).
    Arguments layout = with_layout(base, c);
    layout.given.erase("--pipeline-schedule");
    layout.pipeline_schedule.clear();
    const int64_t dp = world / (c.tp * c.pp * c.cp);
    const int64_t microbatches = c.micro_batch * dp > 0 ? base.global_batch_size / (c.micro_batch * dp) : 0;
    const int64_t chunks =
        c.layers_per_virtual_stage > 0 ? base.num_layers / (c.pp * c.layers_per_virtual_stage) : c.virtual_chunks;
    for (pipeline::ScheduleKind kind : schedule_candidates(static_cast<int>(c.pp), static_cast<int>(chunks),
                                                           static_cast<int>(std::max<int64_t>(1, microbatches)))) {
      Arguments scheduled = layout;
      scheduled.pipeline_schedule = pipeline::to_string(kind);
      scheduled.given.insert("--pipeline-schedule");
      absl::StatusOr<Arguments> args = validate_layout(scheduled, world);
      if (!args.ok()) continue;  // a layout pretrain_gpt refuses
      absl::StatusOr<Prediction> prediction = predict(*args, world, cluster, options);
      if (!prediction.ok()) continue;  // sizes that overflow the memory plan
      ++result.evaluated;
      any_valid = true;
      if (prediction->fits) {
        any_fits = true;
        fitting.push_back(*std::move(prediction));
      }
    }
    if (can_offload && any_valid && !any_fits && c.zero >= 1 && !c.offload) {
      Candidate offloaded = c;
      offloaded.offload = true;
      candidates.push_back(offloaded);
    }
  }
  result.fitting = static_cast<int>(fitting.size());
  std::stable_sort(fitting.begin(), fitting.end(),
                   [](const Prediction& x, const Prediction& y) { return x.iteration_time < y.iteration_time; });
  if (static_cast<int>(fitting.size()) > top) fitting.resize(top);
  result.ranked = std::move(fitting);
  if (result.evaluated == 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("no layout of this model on --world-size ", world, " passes pretrain_gpt's checks"));
  }
  return result;
}

}  // namespace gpt::perf
