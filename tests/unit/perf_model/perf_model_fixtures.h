// What the performance model's unit tests share: an idealised cluster (8 GPUs a node, one GEMM
// efficiency, no latency unless a test sets one) and a layout predicted from a command line.
#pragma once

#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "absl/strings/str_split.h"
#include "perf_model/calibration.h"
#include "perf_model/predict.h"
#include "train/memory_plan.h"

namespace gpt::perf {

inline Cluster ideal_cluster_base() {
  Cluster c;
  c.name = "ideal";
  c.gpus_per_node = 8;
  c.compute_slots_per_node = 8;
  c.peak_flops = 100e12;
  c.memory_bytes = 80.0 * (1 << 30);
  c.memory_bandwidth = 2e12;
  c.intra_node_bandwidth = 200e9;
  c.inter_node_bandwidth = 25e9;
  c.gemm_efficiency = {{1e9, 0.5}};
  c.attention_forward_efficiency = 0.5;
  c.attention_backward_efficiency = 0.5;
  return c;
}

// A calibration of a 2-core test machine without collectives (each test adds its own samples):
// one square GEMM at half the 0.2 TFLOP/s peak.
inline CalibrationResult test_calibration() {
  CalibrationResult r;
  r.name = "test-machine";
  r.device = "cpu: test";
  r.gpus_per_node = 64;
  r.compute_slots_per_node = 2;
  r.peak_flops = 0.2e12;
  r.peak_measured = true;
  r.memory_gib = 16;
  r.memory_bandwidth_Bps = 10e9;
  r.gemms = {{"square 256", 256, 256, 256, 2.0 * 256 * 256 * 256 / 0.1e12}};
  r.attention_forward_efficiency = 0.2;
  r.attention_backward_efficiency = 0.25;
  return r;
}

// The layout pretrain_gpt's checks make of `flags` on `world` ranks (a failed check fails the test).
inline Arguments checked_layout(const std::string& flags, int64_t world) {
  std::vector<std::string> argv = absl::StrSplit(flags, ' ', absl::SkipEmpty());
  absl::StatusOr<Arguments> parsed = parse_model_flags(argv);
  EXPECT_TRUE(parsed.ok()) << parsed.status();
  absl::StatusOr<Arguments> validated = validate_layout(*parsed, world);
  EXPECT_TRUE(validated.ok()) << validated.status();
  return *validated;
}

// The memory plan's closed form for a layout (train/memory_plan.h: the model state without
// alignment, padding or working buffers, the activations from the allocation's lists without the
// leases and receive buffers: the lower bounds the hand-computed figures restate); estimate_memory
// gives the exact plan, what the trainer allocates.
inline MemoryEstimate closed_form_memory(const Arguments& a, int64_t world) {
  absl::StatusOr<MemoryPlan> plan = plan_memory(a, world, vocabulary_before_data(a));
  EXPECT_TRUE(plan.ok()) << plan.status();
  MemoryEstimate m;
  m.parameters = static_cast<double>(plan->parameters);
  m.gradients = static_cast<double>(plan->gradients);
  m.optimizer_state = static_cast<double>(plan->optimizer_state);
  m.activations = static_cast<double>(plan->activations);
  return m;
}

inline Prediction predict_layout(const std::string& flags, int64_t world, const Cluster& cluster,
                                 RunOptions options = {}) {
  absl::StatusOr<Prediction> p = predict(checked_layout(flags, world), world, cluster, options);
  EXPECT_TRUE(p.ok()) << p.status();
  return *p;
}

}  // namespace gpt::perf
