// The performance model's output: a human-readable report and one JSON object per prediction.
#pragma once

#include <string>
#include <vector>

#include "perf_model/cluster.h"
#include "perf_model/predict.h"

namespace gpt::perf {

// The layout in pretrain_gpt's terms, e.g. "TP 8 x PP 2 x DP 48, v 1, mbs 1, SP, dist-opt,
// recompute none".
std::string layout_text(const Prediction& p);

std::string text_report(const Prediction& p, const Cluster& cluster);
// perf_model --memory: the largest rank's memory by item (the memory plan's; under an expert grid
// its routed experts moved to it, expert_layout.h), the total and whether it fits.
std::string memory_report(const Prediction& p);
// {"iteration_time_s": ..., "tflops_per_gpu": ..., "mfu": ..., "memory_gib_per_gpu": ...,
//  "layout": {...}, "time_breakdown_s": {...}, "memory_breakdown_gib": {...}, ...}
std::string json_report(const Prediction& p, const Cluster& cluster);

// --search's margins: each of the best 5 against the next, and which of them lie within the
// model's own error (Cluster::model_error) of the best.
std::string search_margins(const std::vector<Prediction>& ranked, const Cluster& cluster);
// The search's table: rank, layout, iteration time, TFLOP/s per GPU, MFU, memory; then its margins.
std::string search_table(const std::vector<Prediction>& ranked, const Cluster& cluster, int evaluated, int fitting);
std::string search_json(const std::vector<Prediction>& ranked, const Cluster& cluster, int evaluated, int fitting);

}  // namespace gpt::perf
