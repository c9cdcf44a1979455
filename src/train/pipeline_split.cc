#include "train/pipeline_split.h"

#include <string>
#include <tuple>

#include "absl/strings/str_cat.h"
#include "core/check.h"

namespace gpt {
namespace {

absl::Status invalid(const std::string& message) { return absl::InvalidArgumentError(message); }

bool uneven(const Arguments& a) {
  return a.was_given("--decoder-first-pipeline-num-layers") || a.was_given("--decoder-last-pipeline-num-layers");
}

int64_t accounted(const Arguments& a) {
  return (a.account_for_embedding_in_pipeline_split ? 1 : 0) + (a.account_for_loss_in_pipeline_split ? 1 : 0);
}

}  // namespace

std::vector<int64_t> pipeline_rank_layers(const Arguments& a) {
  const int64_t p = a.pipeline_model_parallel_size;
  if (!uneven(a)) return std::vector<int64_t>(static_cast<size_t>(p), pipeline_split_layers(a) / p);
  const bool first = a.was_given("--decoder-first-pipeline-num-layers");
  const bool last = a.was_given("--decoder-last-pipeline-num-layers");
  const int64_t middle_ranks = p - (first ? 1 : 0) - (last ? 1 : 0);
  const int64_t middle_layers = a.num_layers - (first ? a.decoder_first_pipeline_num_layers : 0) -
                                (last ? a.decoder_last_pipeline_num_layers : 0);
  std::vector<int64_t> layers(static_cast<size_t>(p), middle_ranks > 0 ? middle_layers / middle_ranks : 0);
  if (first) layers.front() = a.decoder_first_pipeline_num_layers;
  if (last) layers.back() = a.decoder_last_pipeline_num_layers;
  return layers;
}

bool custom_pipeline_split(const Arguments& a) { return uneven(a) || accounted(a) > 0; }

int64_t pipeline_split_layers(const Arguments& a) { return a.num_layers + accounted(a); }

absl::Status validate_pipeline_split(const Arguments& a) {
  const int64_t p = a.pipeline_model_parallel_size;
  if (a.num_layers_per_virtual_pipeline_stage > 0 &&
      (pipeline_split_layers(a) % p != 0 ||
       (pipeline_split_layers(a) / p) % a.num_layers_per_virtual_pipeline_stage != 0)) {
    return invalid(absl::StrCat("--num-layers (", a.num_layers, ") plus the embedding / loss counted as layers (",
                                pipeline_split_layers(a), ") must be divisible by --pipeline-model-parallel-size (", p,
                                ") x --num-layers-per-virtual-pipeline-stage (", a.num_layers_per_virtual_pipeline_stage,
                                ")"));
  }
  // Each rank's chunks split its layers (with the embedding / loss counted): no more chunks than those.
  if (a.num_virtual_stages_per_pipeline_rank > pipeline_split_layers(a)) {
    return invalid(absl::StrCat("--num-virtual-stages-per-pipeline-rank (", a.num_virtual_stages_per_pipeline_rank,
                                ") exceeds the layers to split (", pipeline_split_layers(a), ")"));
  }
  const int v = virtual_pipeline_size(a);
  if (uneven(a)) {
    const bool first = a.was_given("--decoder-first-pipeline-num-layers");
    const bool last = a.was_given("--decoder-last-pipeline-num-layers");
    const char* flags = first && last ? "--decoder-first-pipeline-num-layers and --decoder-last-pipeline-num-layers"
                        : first       ? "--decoder-first-pipeline-num-layers"
                                      : "--decoder-last-pipeline-num-layers";
    if (accounted(a) > 0) {
      return invalid(absl::StrCat(flags, " cannot be given with --account-for-embedding-in-pipeline-split or "
                                         "--account-for-loss-in-pipeline-split (Megatron's TransformerConfig)"));
    }
    if (a.num_layers_per_virtual_pipeline_stage > 0) {
      return invalid(absl::StrCat("with ", flags, " give the chunks per rank by --num-virtual-stages-per-pipeline-rank, "
                                  "not --num-layers-per-virtual-pipeline-stage (Megatron's rule)"));
    }
    if (p < 2) {
      return invalid(absl::StrCat(flags, " split the layers over pipeline stages: it needs "
                                         "--pipeline-model-parallel-size > 1"));
    }
    for (const auto& [flag, given, layers] :
         {std::tuple{"--decoder-first-pipeline-num-layers", first, a.decoder_first_pipeline_num_layers},
          std::tuple{"--decoder-last-pipeline-num-layers", last, a.decoder_last_pipeline_num_layers}}) {
      if (!given) continue;
      if (layers <= 0) return invalid(absl::StrCat(flag, " must be larger than 0 (got ", layers, ")"));
      if (layers > a.num_layers) {
        return invalid(absl::StrCat(flag, " (", layers, ") exceeds --num-layers (", a.num_layers, ")"));
      }
      if (v > 1 && layers % v != 0) {
        return invalid(absl::StrCat(flag, " (", layers, ") must be divisible by the model chunks per pipeline rank (",
                                    v, ", --num-virtual-stages-per-pipeline-rank)"));
      }
    }
    const int64_t ends = (first ? a.decoder_first_pipeline_num_layers : 0) + (last ? a.decoder_last_pipeline_num_layers : 0);
    if (ends > a.num_layers) {
      return invalid(absl::StrCat(flags, " (", ends, " layers) exceed --num-layers (", a.num_layers, ")"));
    }
    const int64_t middle_layers = a.num_layers - ends, middle_ranks = p - (first ? 1 : 0) - (last ? 1 : 0);
    if ((middle_layers > 0) != (middle_ranks > 0)) {
      return invalid(absl::StrCat("--num-layers (", a.num_layers, ") less ", flags, " leaves ", middle_layers,
                                  " layers for the ", middle_ranks, " other pipeline stages; each needs at least one "
                                  "and every layer a stage"));
    }
    if (middle_ranks > 0 && middle_layers % middle_ranks != 0) {
      return invalid(absl::StrCat("the ", middle_layers, " layers left by ", flags, " must be divisible by the ",
                                  middle_ranks, " other pipeline stages"));
    }
    if (middle_ranks > 0 && v > 1 && (middle_layers / middle_ranks) % v != 0) {
      return invalid(absl::StrCat("the ", middle_layers / middle_ranks, " layers of each of the other pipeline stages (",
                                  flags, ") must be divisible by the model chunks per pipeline rank (", v, ")"));
    }
    return absl::OkStatus();
  }
  const int64_t layers = pipeline_split_layers(a);
  const std::string counted =
      accounted(a) == 0 ? absl::StrCat("--num-layers (", layers, ")")
                        : absl::StrCat("--num-layers (", a.num_layers, ") plus the ",
                                       accounted(a) == 2 ? "embedding and the loss" : "embedding or the loss",
                                       " counted as layers (--account-for-",
                                       accounted(a) == 2                            ? "embedding/loss"
                                       : a.account_for_embedding_in_pipeline_split ? "embedding"
                                                                                   : "loss",
                                       "-in-pipeline-split), ", layers, ",");
  if (layers % p != 0) {
    return invalid(absl::StrCat(counted, " must be divisible by --pipeline-model-parallel-size (", p, ")"));
  }
  if ((layers / p) % v != 0) {
    return invalid(absl::StrCat("the ", layers / p, " layers of each pipeline stage (", counted,
                                " over --pipeline-model-parallel-size ", p,
                                ") must be divisible by the model chunks per pipeline rank (", v, ")"));
  }
  return absl::OkStatus();
}

std::vector<int64_t> virtual_stage_layers(const Arguments& a) {
  const int64_t p = a.pipeline_model_parallel_size, v = virtual_pipeline_size(a);
  const std::vector<int64_t> per_rank = pipeline_rank_layers(a);
  std::vector<int64_t> layers(static_cast<size_t>(p * v));
  for (int64_t c = 0; c < v; ++c) {
    for (int64_t r = 0; r < p; ++r) layers[static_cast<size_t>(c * p + r)] = per_rank[static_cast<size_t>(r)] / v;
  }
  // The embedding (the loss) took one layer's place in the first (last) virtual stage.
  if (a.account_for_embedding_in_pipeline_split) --layers.front();
  if (a.account_for_loss_in_pipeline_split) --layers.back();
  int64_t total = 0;
  for (int64_t n : layers) {
    GPT_CHECK_GE(n, 0) << "virtual stage layers (validate_pipeline_split)";
    total += n;
  }
  GPT_CHECK_EQ(total, a.num_layers) << "virtual stage layers (validate_pipeline_split)";
  return layers;
}

}  // namespace gpt
