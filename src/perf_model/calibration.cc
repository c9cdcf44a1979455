#include "perf_model/calibration.h"

#include <algorithm>
#include <cmath>
#include <map>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpt::perf {
namespace {

// The ring model's coefficients of (bytes / bw) and of latency for one sample.
std::pair<double, double> ring_terms(const CollectiveSample& s) {
  const double n = s.span;
  if (s.op == "all_reduce") return {2 * (n - 1) / n * s.bytes, 2 * (n - 1)};
  return {(n - 1) / n * s.bytes, n - 1};
}

double median(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  const size_t mid = values.size() / 2;
  return values.size() % 2 ? values[mid] : 0.5 * (values[mid - 1] + values[mid]);
}

// The four host-overhead keys: fitted to the trainer probes when there are some, else 0.
std::string overhead_lines(const CalibrationResult& r) {
  const std::string kernel_alone =
      r.op_overhead_s > 0 ? absl::StrFormat("; gelu_forward on [1, 64] alone: %.3g us", r.op_overhead_s * 1e6) : "";
  if (r.probes.empty()) {
    return absl::StrCat("kernel_overhead_us = 0   # NOT measured (no trainer probes)", kernel_alone, "\n",
                        "microbatch_overhead_us = 0   # NOT measured\n", "collective_overhead_us = 0   # NOT measured\n",
                        "iteration_overhead_ms = 0   # NOT measured\n");
  }
  const OverheadFit& f = r.overhead;
  std::string out = absl::StrFormat(
      "# Host overhead: fitted to %d trainer probe runs (listed at the end: train_step timed against the\n"
      "# model priced by the microbenchmarks above alone); rms error %.1f%% after, %.1f%% before (mean %+.1f%%).\n",
      f.samples, 100 * f.rms_relative_error, 100 * f.rms_relative_error_before, 100 * f.mean_relative_residual_before);
  absl::StrAppend(&out,
                  absl::StrFormat("kernel_overhead_us = %.4g   # per op, fitted%s\n", f.per_op_s * 1e6, kernel_alone),
                  absl::StrFormat("microbatch_overhead_us = %.4g   # per chunk pass (a microbatch's forward or backward), fitted\n",
                                  f.per_pass_s * 1e6),
                  absl::StrFormat("collective_overhead_us = %.4g   # per communication call, fitted\n",
                                  f.per_collective_s * 1e6),
                  absl::StrFormat("iteration_overhead_ms = %.4g   # per iteration, fitted\n", f.per_iteration_s * 1e3));
  return out;
}

}  // namespace

LatencyBandwidth fit_ring_collectives(const std::vector<CollectiveSample>& samples) {
  // Least squares of t = x / bw + y lat, weighted by 1 / t so that small and large messages count
  // alike (relative error), in the unknowns u = 1 / bw and lat.
  double sxx = 0, sxy = 0, syy = 0, sxt = 0, syt = 0;
  std::vector<double> sizes;
  for (const CollectiveSample& s : samples) {
    if (s.span < 2 || s.seconds <= 0) continue;
    const auto [x, y] = ring_terms(s);
    const double w = 1.0 / (s.seconds * s.seconds);
    sxx += w * x * x, sxy += w * x * y, syy += w * y * y, sxt += w * x * s.seconds, syt += w * y * s.seconds;
    sizes.push_back(s.bytes);
  }
  LatencyBandwidth fit;
  std::sort(sizes.begin(), sizes.end());
  if (sizes.size() < 2 || sizes.front() == sizes.back()) return fit;
  const double det = sxx * syy - sxy * sxy;
  double u = det > 0 ? (sxt * syy - syt * sxy) / det : 0;
  double lat = det > 0 ? (sxx * syt - sxy * sxt) / det : 0;
  if (lat < 0 || det <= 0) lat = 0, u = sxt / sxx;  // bandwidth alone
  if (u <= 0) {                                     // latency alone cannot describe growing sizes
    return fit;
  }
  fit.latency_s = lat;
  fit.bandwidth_Bps = 1.0 / u;
  double sum = 0;
  int count = 0;
  for (const CollectiveSample& s : samples) {
    if (s.span < 2 || s.seconds <= 0) continue;
    const auto [x, y] = ring_terms(s);
    const double r = (x * u + y * lat) / s.seconds - 1;
    sum += r * r, ++count;
  }
  fit.rms_relative_error = std::sqrt(sum / count);
  return fit;
}

std::vector<std::pair<double, double>> gemm_efficiency_curve(const std::vector<GemmSample>& samples,
                                                             double peak_flops) {
  std::map<int, std::pair<std::vector<double>, std::vector<double>>> decades;  // -> (flops, efficiency)
  for (const GemmSample& s : samples) {
    if (s.seconds <= 0 || s.flops() <= 0) continue;
    auto& [flops, efficiency] = decades[static_cast<int>(std::floor(std::log10(s.flops())))];
    flops.push_back(s.flops());
    efficiency.push_back(s.flops() / s.seconds / peak_flops);
  }
  std::vector<std::pair<double, double>> curve;
  double running = 0;
  for (auto& [decade, group] : decades) {
    running = std::min(1.0, std::max(running, median(group.second)));
    curve.emplace_back(median(group.first), running);
  }
  return curve;
}

std::string cluster_file_text(const CalibrationResult& r, std::string* error) {
  const auto fail = [&](const std::string& what) {
    *error = what;
    return std::string();
  };
  if (r.peak_flops <= 0) return fail("no GEMM rate was measured");
  if (r.memory_bandwidth_Bps <= 0) return fail("no memory bandwidth was measured");
  const std::vector<std::pair<double, double>> curve = gemm_efficiency_curve(r.gemms, r.peak_flops);
  if (curve.empty()) return fail("no GEMM was timed");
  const LatencyBandwidth link = fit_ring_collectives(r.collectives);
  if (link.bandwidth_Bps <= 0) {
    return fail("the collectives gave no positive bandwidth (run under mpirun with at least 2 ranks)");
  }
  if (r.attention_forward_efficiency <= 0 || r.attention_backward_efficiency <= 0) {
    return fail("attention was not timed");
  }
  std::string out = absl::StrCat(
      "# Measured by perf_calibrate on ", r.device, ".\n",
      "# Every number below is a measurement on that machine, except where a line says otherwise.\n",
      "# The curves each number was fitted from are listed at the end of the file.\n", "name = ", r.name, "\n",
      "gpus_per_node = ", r.gpus_per_node, "   # the ranks the collectives ran on (one node)\n",
      "compute_slots_per_node = ", r.compute_slots_per_node, "\n",
      absl::StrFormat("peak_tflops = %.6g   # %s\n", r.peak_flops / 1e12,
                      r.peak_measured ? "the best GEMM rate measured (efficiencies are relative to it)"
                                      : "given with --peak-tflops (datasheet)"),
      absl::StrFormat("memory_gib = %.4g   # %s\n", r.memory_gib, "the device's memory (host RAM on the CPU)"),
      "memory_reserved_gib = 0\n",
      absl::StrFormat("memory_bandwidth_GBps = %.6g   # median of the memory-bound ops listed at the end\n",
                      r.memory_bandwidth_Bps / 1e9),
      "memory_bandwidth_efficiency = 1\n",
      r.host_link_Bps > 0 ? absl::StrFormat("host_link_bandwidth_GBps = %.6g   # %s\n", r.host_link_Bps / 1e9,
                                            r.host_link_note)
                          : std::string("# host_link_bandwidth_GBps: not measured\n"),
      r.host_adamw_Bps > 0
          ? absl::StrFormat("host_adamw_GBps = %.6g   # the trainer's adamw_update on host memory, every rank at once\n",
                            r.host_adamw_Bps / 1e9)
          : std::string("# host_adamw_GBps: not measured\n"),
      absl::StrFormat("intra_node_bandwidth_GBps = %.6g   # ring fit of every collective below (rms error %.0f%%)\n",
                      link.bandwidth_Bps / 1e9, 100 * link.rms_relative_error),
      absl::StrFormat("inter_node_bandwidth_GBps = %.6g   # NOT measured: one node; the intra-node figure\n",
                      link.bandwidth_Bps / 1e9),
      absl::StrFormat("intra_node_latency_us = %.6g   # same fit\n", link.latency_s * 1e6),
      absl::StrFormat("inter_node_latency_us = %.6g   # NOT measured: the intra-node figure\n", link.latency_s * 1e6),
      "intra_node_efficiency = 1   # the fitted bandwidth is the achieved one\n", "inter_node_efficiency = 1\n",
      "gemm_efficiency = ");
  for (size_t i = 0; i < curve.size(); ++i) {
    absl::StrAppend(&out, i ? ", " : "", absl::StrFormat("%.3g:%.3f", curve[i].first, curve[i].second));
  }
  absl::StrAppend(&out, "   # median per decade of FLOPs, non-decreasing\n",
                  absl::StrFormat("attention_forward_efficiency = %.3f   # %s, causal FLOPs executed\n",
                                  std::min(1.0, r.attention_forward_efficiency), r.attention_shape),
                  absl::StrFormat("attention_backward_efficiency = %.3f   # same shape, 2.5x the forward's FLOPs\n",
                                  std::min(1.0, r.attention_backward_efficiency)),
                  overhead_lines(r),
                  "tp_comm_overlap_fraction = 0   # NOT measured: this trainer does not overlap TP communication\n",
                  "dp_comm_overlap_fraction = 0   # NOT measured\n", "#\n# GEMMs (m x n x k, ms, TFLOP/s):\n");
  for (const GemmSample& g : r.gemms) {
    absl::StrAppend(&out, absl::StrFormat("#   %-16s %6d x %6d x %6d  %9.3f ms  %8.4f\n", g.what, g.m, g.n, g.k,
                                          g.seconds * 1e3, g.flops() / g.seconds / 1e12));
  }
  absl::StrAppend(&out, "# Memory-bound ops (GB/s of the bytes the model charges):\n");
  for (const auto& [op, bandwidth] : r.memory_kernels) {
    absl::StrAppend(&out, absl::StrFormat("#   %-20s %8.3f\n", op, bandwidth / 1e9));
  }
  if (!r.probes.empty()) {
    absl::StrAppend(&out, "# Trainer probes (ms per iteration: measured, predicted without overhead, with the fitted terms;\n"
                          "# per iteration: ops, chunk passes, communication calls):\n");
    const OverheadFit& f = r.overhead;
    for (const OverheadSample& p : r.probes) {
      const double fitted = p.predicted_s + f.per_op_s * p.ops + f.per_pass_s * p.passes +
                            f.per_collective_s * p.collectives + f.per_iteration_s;
      absl::StrAppend(&out, absl::StrFormat("#   %-34s %8.2f %8.2f %8.2f   %6.0f %4.0f %5.0f\n", p.name,
                                            p.measured_s * 1e3, p.predicted_s * 1e3, fitted * 1e3, p.ops, p.passes,
                                            p.collectives));
    }
  }
  absl::StrAppend(&out, "# Collectives (op, ranks, bytes, us, algorithm bandwidth GB/s):\n");
  for (const CollectiveSample& c : r.collectives) {
    absl::StrAppend(&out, absl::StrFormat("#   %-14s %2d  %10.0f  %10.1f  %8.4f\n", c.op, c.span, c.bytes,
                                          c.seconds * 1e6, c.bytes / c.seconds / 1e9));
  }
  return out;
}

}  // namespace gpt::perf
