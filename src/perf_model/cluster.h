// A cluster description for the performance model: the accelerator (peak dense FLOP/s, memory and
// its bandwidth), the links (NVLink-class inside a node, InfiniBand-class between nodes, per GPU
// and per direction), and the calibrated efficiencies that turn peaks into achieved rates.
//
// File format (configs/clusters/*.conf): one `key = value` per line, `#` starts a comment, every
// key of the table in cluster.cc at most once; the required ones must appear. Units are in the key
// names (GBps: 1e9 bytes per second, us: microseconds, gib: 2^30 bytes). gemm_efficiency is a list
// `flops:efficiency, ...` by a GEMM's FLOP count, interpolated in log(flops), flat outside.
#pragma once

#include <string>
#include "absl/strings/string_view.h"
#include <utility>
#include <vector>

#include "core/status.h"

namespace gpt::perf {

struct Cluster {
  std::string name;
  std::string source;  // the file it came from, for the report

  // Devices.
  int gpus_per_node = 0;
  // Devices that compute at once on a node: fewer than gpus_per_node when ranks share cores (the
  // CPU backend oversubscribed); ranks beyond it time-share, stretching compute by ranks / slots.
  int compute_slots_per_node = 0;
  double peak_flops = 0;                // dense, in the training precision (BF16 on GPUs)
  double memory_bytes = 0;              // per device
  double memory_reserved_bytes = 0;     // not available to the model: context, communicator buffers
  double memory_bandwidth = 0;          // bytes/s
  double memory_bandwidth_efficiency = 1;

  // Links, per device and direction (bytes/s), and the per-step latency of a collective.
  double intra_node_bandwidth = 0;
  double inter_node_bandwidth = 0;
  double intra_node_latency = 0;        // s
  double inter_node_latency = 0;        // s
  double intra_node_efficiency = 1;     // achieved bus bandwidth / link bandwidth
  double inter_node_efficiency = 1;

  // The host: each device's link to host memory (PCIe, per direction) and the host's AdamW rate per
  // device (bytes of optimizer traffic per second, as memory_bandwidth counts the device's), for
  // optimizer offload. 0: not described (offload cannot be predicted).
  double host_link_bandwidth = 0;
  double host_adamw_bandwidth = 0;

  // Compute calibration.
  std::vector<std::pair<double, double>> gemm_efficiency;  // (flops, fraction of peak), ascending
  double attention_forward_efficiency = 0;   // of peak, on the causal attention's executed FLOPs
  double attention_backward_efficiency = 0;
  // The host's work beyond the kernels (overhead_fit.h; perf_calibrate fits them from trainer runs).
  double kernel_overhead = 0;                // s per op launched (layer_ops.h's list, forward and backward)
  double microbatch_overhead = 0;            // s per chunk pass (one microbatch's forward, or its backward)
  double collective_overhead = 0;            // s per communication call (TP, CP, DP, the step's scalar ones)
  double iteration_overhead = 0;             // s per iteration (data, logging, host work)

  // Overlap calibration: the share of a communication hidden behind compute when the run asks for
  // the overlap (--tp-comm-overlap; --overlap-grad-reduce / --overlap-param-gather).
  double tp_comm_overlap_fraction = 0;
  double dp_comm_overlap_fraction = 0;

  // The model's own error with this file: its held-out mean absolute error on measured runs
  // (docs/PERFORMANCE_MODEL.md). --search says which of its best layouts lie within it of each other,
  // an order the model cannot tell. 0.1 (the project's target) where a file does not state it.
  double model_error = 0.1;

  // Achieved fraction of peak for one GEMM of `flops` floating-point operations.
  double gemm_efficiency_at(double flops) const;
};

// Parses a description; `origin` names the file in messages ("dgx-h100.conf:12: ...").
absl::StatusOr<Cluster> parse_cluster(absl::string_view text, absl::string_view origin);

// --cluster NAME|FILE: a path that exists (or contains '/' or ends in .conf) is read; otherwise
// NAME.conf is looked up in the shipped directories (clusters_directories()).
absl::StatusOr<Cluster> load_cluster(absl::string_view name_or_path, absl::string_view executable_path);

// Where shipped descriptions are looked for, in order: <exe>/../share/gpt/clusters (installed),
// <exe>/../../configs/clusters (build/bin in the source tree), the source tree compiled in.
std::vector<std::string> clusters_directories(absl::string_view executable_path);

}  // namespace gpt::perf
