// --search: every layout of a model on a world size that pretrain_gpt accepts, within
//   TP        1, 2, 4, ... up to the GPUs of one node (dividing the heads and the world)
//   PP        dividing world / TP; where it does not divide the layers, Megatron's
//             --decoder-first/last-pipeline-num-layers with the most even split (most_even_split)
//   v         1, or each number of chunks per rank that divides the stage's layers (PP > 1; with
//             the uneven split, each stage's: --num-virtual-stages-per-pipeline-rank)
//   DP        the rest
//   EP, ETP   MoE models: EP each divisor of the experts, ETP 1 or TP, ETP x EP x PP dividing the world
//             (an --expert-model-parallel-size or --expert-tensor-parallel-size given is kept)
//   mbs       1, 2, 4, 8 (at most the batch per DP rank)
//   SP        off, and on with TP > 1
//   ZeRO      --use-distributed-optimizer off, and on with DP > 1
//   recompute none, selective, full (uniform, groups of 1)
//   schedule  each the layout's chunks can run: 1f1b, zb-h1 (v = 1); interleaved, zb-v (v = 2);
//             interleaved (v > 2), with its own simulated bubble and memory plan
// predicted with predict(), those whose largest rank does not fit the cluster's memory dropped,
// ranked by predicted throughput (the global batch is fixed, so by iteration time).
#pragma once

#include <vector>

#include "perf_model/predict.h"

namespace gpt::perf {

struct SearchResult {
  std::vector<Prediction> ranked;  // fitting layouts, fastest first, at most `top`
  int evaluated = 0;               // layouts that passed pretrain_gpt's validation
  int fitting = 0;
};

// The most even split of `layers` over `pp` stages that Megatron's first / last stage layer counts
// allow where pp does not divide them: the middle stages `middle` layers each, the first and last
// stages the rest, the largest stage as small as it can be (ties: the ends lighter, as they also
// run the embedding and the LM head; the first stage gets the odd layer, the last the LM head).
// All 0 where pp divides the layers (or pp < 2, or fewer layers than stages).
struct UnevenSplit {
  int64_t first = 0, middle = 0, last = 0;
};
UnevenSplit most_even_split(int64_t layers, int64_t pp);

// `base`: parse_model_flags' result (not validated), with --global-batch-size; its layout flags
// are replaced by each candidate's, its other flags (--overlap-grad-reduce, ...) kept.
absl::StatusOr<SearchResult> search_layouts(const Arguments& base, int64_t world_size, const Cluster& cluster,
                                            const RunOptions& options, int top);

}  // namespace gpt::perf
