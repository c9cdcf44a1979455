// perf_model: predicts a GPT training run's iteration time, TFLOP/s per GPU, MFU and memory per GPU
// on a described cluster, from pretrain_gpt's own flags (docs/PERFORMANCE_MODEL.md):
//
//   perf_model --cluster dgx-h100 --world-size 96 --num-layers 30 --hidden-size 4096
//       --num-attention-heads 32 --seq-length 4096 --max-position-embeddings 4096 --vocab-size 131072
//       --micro-batch-size 1 --global-batch-size 192 --tensor-model-parallel-size 2 --sequence-parallel
//       --use-distributed-optimizer --bf16 [--json]
//   perf_model --search --top 10 --cluster dgx-h100 --world-size 64 <model flags> --global-batch-size 512
//
// Every flag it does not own is pretrain_gpt's and goes through pretrain_gpt's parser and checks
// (--train-iters, --lr and --mock-data are filled in when absent), so a launch script's flags work
// unchanged and a bad size is refused with pretrain_gpt's message.
#include <cstdio>
#include <string>
#include <vector>

#include "CLI/CLI.hpp"
#include "absl/strings/str_cat.h"
#include "cli_parse.h"
#include "perf_model/cluster.h"
#include "perf_model/predict.h"
#include "perf_model/report.h"
#include "perf_model/search.h"
#include "train/args/numeric_flags.h"

namespace {

int fail(const absl::Status& status) {
  std::fprintf(stderr, "error: %s\n", std::string(status.message()).c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "Predicts iteration time, TFLOP/s per GPU, MFU and memory per GPU of a pretrain_gpt run on a cluster. Every "
      "other flag is pretrain_gpt's (model, layout, --bf16, --overlap-grad-reduce, ...)."};
  int64_t world_size = 0;
  std::string cluster_name;
  bool json = false, search = false;
  int top = 10;
  gpt::perf::RunOptions options;
  app.add_option("--world-size", world_size, "number of GPUs (ranks), from 1")
      ->required()
      ->transform(gpt::decimal_integer(1));
  app.add_option("--cluster", cluster_name, "a shipped cluster (dgx-h100, dgx-a100, cpu) or a cluster file")->required();
  app.add_flag("--json", json, "print one JSON object instead of the report");
  app.add_flag("--search", search, "rank every layout of the model on --world-size that fits in memory");
  app.add_option("--top", top, "with --search: how many layouts to print, from 1")
      ->transform(gpt::decimal_integer(1, std::numeric_limits<int>::max()));
  app.add_flag("--tp-comm-overlap", options.tp_comm_overlap,
               "Megatron's TP communication overlap: hide the cluster's tp_comm_overlap_fraction of it");
  app.add_flag("--overlap-cpu-optimizer-d2h-h2d", options.overlap_offload_copies,
               "Megatron's pipelining of the offloaded optimizer's copies and host step per bucket (the trainer runs "
               "them one after another)");
  app.add_option("--moe-imbalance", options.expert_imbalance,
                 "MoE: the busiest rank's routed tokens over the mean (1: uniform routing, as Megatron's "
                 "--moe-router-force-load-balancing benchmarks)")
      ->check(gpt::number_in(gpt::NumberRange::from_to(1.0, 1e6)));
  bool memory_only = false;
  app.add_flag("--memory", memory_only,
               "print only the memory per GPU of the layout (the memory plan pretrain_gpt checks at start-up)");
  std::string implementation = "trainer";
  app.add_option("--implementation", implementation,
                 "whose implementation choices to model: trainer (pretrain_gpt's memory plan) or "
                 "megatron (Megatron-LM's activation stash, to predict published Megatron runs) or "
                 "deepspeed (Megatron's model under DeepSpeed's 2021 ZeRO-3: a collective per parameter tensor, "
                 "re-gathers beyond stage3_max_reuse_distance, prefetch within stage3_max_live_parameters)")
      ->check(CLI::IsMember({"trainer", "megatron", "deepspeed"}));
  app.allow_extras();
  if (std::optional<int> exit_code = gpt::parse_command_line(app, argc, argv)) return *exit_code;

  if (implementation == "megatron") options.implementation = gpt::perf::Implementation::kMegatron;
  if (implementation == "deepspeed") options.implementation = gpt::perf::Implementation::kDeepSpeed;

  absl::StatusOr<gpt::perf::Cluster> cluster = gpt::perf::load_cluster(cluster_name, argv[0]);
  if (!cluster.ok()) return fail(cluster.status());
  absl::StatusOr<gpt::Arguments> parsed = gpt::perf::parse_model_flags(app.remaining());
  if (!parsed.ok()) return fail(parsed.status());

  if (search && memory_only) {
    return fail(absl::InvalidArgumentError("--memory prints one layout's memory per GPU: give it without --search"));
  }
  if (search) {
    absl::StatusOr<gpt::perf::SearchResult> result =
        gpt::perf::search_layouts(*parsed, world_size, *cluster, options, top);
    if (!result.ok()) return fail(result.status());
    if (result->ranked.empty()) {
      return fail(absl::ResourceExhaustedError(
          absl::StrCat("none of the ", result->evaluated, " valid layouts fits in the cluster's memory")));
    }
    const std::string out = json ? gpt::perf::search_json(result->ranked, *cluster, result->evaluated, result->fitting)
                                 : gpt::perf::search_table(result->ranked, *cluster, result->evaluated, result->fitting);
    std::fputs(out.c_str(), stdout);
    return 0;
  }

  absl::StatusOr<gpt::Arguments> args = gpt::perf::validate_layout(*std::move(parsed), world_size);
  if (!args.ok()) return fail(args.status());
  absl::StatusOr<gpt::perf::Prediction> prediction = gpt::perf::predict(*args, world_size, *cluster, options);
  if (!prediction.ok()) return fail(prediction.status());
  const std::string out = json          ? gpt::perf::json_report(*prediction, *cluster)
                          : memory_only ? gpt::perf::memory_report(*prediction)
                                        : gpt::perf::text_report(*prediction, *cluster);
  std::fputs(out.c_str(), stdout);
  return 0;
}
