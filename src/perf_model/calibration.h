// From microbenchmark samples to a cluster description (apps/perf_calibrate.cc measures; this file
// fits and writes, so the fitting is testable without a machine to measure). The cluster format
// (cluster.h) keeps one GEMM efficiency curve indexed by FLOPs and one latency/bandwidth pair per
// link; the measured curves themselves (every GEMM shape, every collective at every size and group
// span) are written beside it as comments and in the tool's JSON.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "perf_model/overhead_fit.h"

namespace gpt::perf {

// One timed GEMM: out[m, n] = a[m, k] @ b[k, n] (2 m n k FLOPs), median seconds per call.
struct GemmSample {
  std::string what;  // "qkv tp2", "square 256", ...
  int64_t m = 0, n = 0, k = 0;
  double seconds = 0;
  double flops() const { return 2.0 * static_cast<double>(m) * n * k; }
};

// One timed collective on a group of `span` ranks of one node: bytes of the whole tensor.
struct CollectiveSample {
  std::string op;  // "all_reduce", "all_gather", "reduce_scatter"
  int span = 0;
  double bytes = 0;
  double seconds = 0;
};

struct LatencyBandwidth {
  double latency_s = 0;
  double bandwidth_Bps = 0;  // bytes/s of the ring's per-step transfer (collectives.h's "bw")
  double rms_relative_error = 0;
};

// The ring alpha-beta model of collectives.h fitted by least squares over every sample (all ops and
// spans together, since the cluster file has one pair per link):
//   all-reduce      2 (n-1)/n bytes / bw + 2 (n-1) latency
//   all-gather, reduce-scatter  (n-1)/n bytes / bw + (n-1) latency
// Latency is clamped at >= 0 (refitting the bandwidth alone); samples with span < 2 are ignored.
// Fails (bandwidth 0) without two usable samples of different size.
LatencyBandwidth fit_ring_collectives(const std::vector<CollectiveSample>& samples);

// GEMM efficiency (achieved / peak) by FLOP count: the samples grouped per decade of FLOPs, each
// group's median efficiency at its median FLOPs, then made non-decreasing with size (a larger GEMM
// is given at least the efficiency of a smaller one: the measured dips are noise or tile effects the
// FLOP-indexed curve cannot express) and capped at 1. Ascending in FLOPs.
std::vector<std::pair<double, double>> gemm_efficiency_curve(const std::vector<GemmSample>& samples,
                                                             double peak_flops);

// Everything measured, and what the file says about the machine.
struct CalibrationResult {
  std::string name;
  std::string device;  // "cpu: 2 cores, 1 BLAS thread per rank" / "gpu: ..."
  int gpus_per_node = 1;
  int compute_slots_per_node = 1;
  double peak_flops = 0;       // the given peak, or the best measured GEMM rate
  bool peak_measured = false;  // true when peak_flops is the best measured rate
  double memory_gib = 0;
  // The trainer's memory-bound ops on large tensors, each as the bytes the model charges it per
  // second (copy and the norm and GELU: read + write; AdamW: 32 bytes per FP32 parameter); the
  // cluster's memory bandwidth is their median.
  std::vector<std::pair<std::string, double>> memory_kernels;
  double memory_bandwidth_Bps = 0;
  // Optimizer offload: the trainer's AdamW on the host (bytes it charges per second, per rank with
  // every rank stepping) and the device's link to host memory (bytes/s per direction).
  double host_adamw_Bps = 0;
  // What an op costs beyond its work: the trainer's gelu_forward on a [1, 64] tensor, per call
  // (the kernel alone; a comment of the file).
  double op_overhead_s = 0;
  // The trainer's probe runs and the host-overhead terms fitted to them (overhead_fit.h); without
  // probes every overhead key is written 0, marked NOT measured.
  std::vector<OverheadSample> probes;
  OverheadFit overhead;
  double host_link_Bps = 0;
  std::string host_link_note;
  std::vector<GemmSample> gemms;
  double attention_forward_efficiency = 0;
  double attention_backward_efficiency = 0;
  std::string attention_shape;
  std::vector<CollectiveSample> collectives;
};

// The cluster file text: every key the format requires, each with a comment saying how it was
// measured; the raw curves as comments. Fails (empty string and `error`) when a number is not
// usable (a non-positive bandwidth or rate).
std::string cluster_file_text(const CalibrationResult& result, std::string* error);

}  // namespace gpt::perf
