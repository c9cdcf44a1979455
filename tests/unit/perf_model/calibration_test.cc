// perf_model/calibration: the fits that turn perf_calibrate's samples into a cluster file recover
// known parameters from synthetic samples, the GEMM curve is non-decreasing and capped, and the file
// text parses back to the measured numbers.
#include "perf_model/calibration.h"

#include <gtest/gtest.h>

#include "perf_model/cluster.h"
#include "unit/perf_model/perf_model_fixtures.h"

namespace gpt::perf {
namespace {

// Samples of the ring model with latency `lat` (s) and bandwidth `bw` (bytes/s), times (1 + noise_i).
std::vector<CollectiveSample> ring_samples(double lat, double bw, std::vector<double> noise = {}) {
  std::vector<CollectiveSample> samples;
  size_t i = 0;
  for (int span : {2, 4}) {
    for (double bytes : {4096.0, 65536.0, 1048576.0, 16777216.0}) {
      const double n = span;
      const double scale = i < noise.size() ? 1 + noise[i] : 1;
      ++i;
      samples.push_back({"all_reduce", span, bytes, (2 * (n - 1) / n * bytes / bw + 2 * (n - 1) * lat) * scale});
      samples.push_back({"all_gather", span, bytes, ((n - 1) / n * bytes / bw + (n - 1) * lat) * scale});
    }
  }
  return samples;
}

TEST(Calibration, RingFitRecoversLatencyAndBandwidth) {
  const LatencyBandwidth fit = fit_ring_collectives(ring_samples(50e-6, 2e9));
  EXPECT_NEAR(fit.latency_s, 50e-6, 1e-12);
  EXPECT_NEAR(fit.bandwidth_Bps, 2e9, 1e-3);
  EXPECT_LT(fit.rms_relative_error, 1e-9);
}

TEST(Calibration, RingFitNeverReturnsNegativeLatency) {
  // No latency and noise that would pull an unconstrained fit below zero.
  const LatencyBandwidth fit = fit_ring_collectives(ring_samples(0, 1e9, {-0.3, 0.1, 0.05, 0.0, -0.3, 0.1, 0, 0}));
  EXPECT_GE(fit.latency_s, 0);
  EXPECT_GT(fit.bandwidth_Bps, 0);
}

TEST(Calibration, RingFitNeedsTwoSizesOfAGroup) {
  EXPECT_EQ(fit_ring_collectives({{"all_reduce", 2, 4096, 1e-4}}).bandwidth_Bps, 0);
  EXPECT_EQ(fit_ring_collectives({{"all_reduce", 1, 4096, 1e-4}, {"all_reduce", 1, 8192, 2e-4}}).bandwidth_Bps, 0);
}

TEST(Calibration, GemmCurveIsMedianPerDecadeNonDecreasingAndCapped) {
  const double peak = 1e12;
  // 2 m n k: 2e6 (decade 6), 2e9 and 4e9 and 6e9 (decade 9), 2e12 (decade 12).
  const auto at = [&](int64_t m, int64_t n, int64_t k, double efficiency) {
    return GemmSample{"g", m, n, k, 2.0 * m * n * k / (efficiency * peak)};
  };
  const std::vector<GemmSample> samples = {at(100, 100, 100, 0.3), at(1000, 1000, 1000, 0.6),
                                           at(2000, 1000, 1000, 0.5), at(3000, 1000, 1000, 0.7),
                                           at(10000, 10000, 10000, 0.4)};
  const auto curve = gemm_efficiency_curve(samples, peak);
  ASSERT_EQ(curve.size(), 3u);
  EXPECT_NEAR(curve[0].first, 2e6, 1);
  EXPECT_NEAR(curve[0].second, 0.3, 1e-12);
  EXPECT_NEAR(curve[1].first, 4e9, 1);       // median FLOPs of the decade
  EXPECT_NEAR(curve[1].second, 0.6, 1e-12);  // median efficiency of the decade
  EXPECT_NEAR(curve[2].second, 0.6, 1e-12);  // the measured 0.4 is raised to the smaller GEMMs' 0.6
  const auto capped = gemm_efficiency_curve({at(100, 100, 100, 1.5)}, peak);
  EXPECT_EQ(capped.front().second, 1.0);
}

CalibrationResult measured() {
  CalibrationResult r = test_calibration();
  r.collectives = ring_samples(100e-6, 3e9);
  return r;
}

TEST(Calibration, ClusterFileParsesBackToTheMeasurements) {
  std::string error;
  const std::string text = cluster_file_text(measured(), &error);
  ASSERT_FALSE(text.empty()) << error;
  absl::StatusOr<Cluster> cluster = parse_cluster(text, "measured.conf");
  ASSERT_TRUE(cluster.ok()) << cluster.status();
  EXPECT_EQ(cluster->name, "test-machine");
  EXPECT_NEAR(cluster->peak_flops, 0.2e12, 1e6);
  EXPECT_NEAR(cluster->memory_bandwidth, 10e9, 1e4);
  EXPECT_NEAR(cluster->intra_node_bandwidth, 3e9, 3e9 * 1e-5);
  EXPECT_NEAR(cluster->intra_node_latency, 100e-6, 1e-9);
  EXPECT_EQ(cluster->compute_slots_per_node, 2);
  EXPECT_NEAR(cluster->gemm_efficiency_at(2.0 * 256 * 256 * 256), 0.5, 1e-3);
  EXPECT_NEAR(cluster->attention_backward_efficiency, 0.25, 1e-6);
}

TEST(Calibration, RefusesAFileWithoutCollectivesOrRates) {
  std::string error;
  CalibrationResult no_collectives = measured();
  no_collectives.collectives.clear();
  EXPECT_TRUE(cluster_file_text(no_collectives, &error).empty());
  EXPECT_NE(error.find("mpirun"), std::string::npos) << error;
  CalibrationResult no_bandwidth = measured();
  no_bandwidth.memory_bandwidth_Bps = 0;
  EXPECT_TRUE(cluster_file_text(no_bandwidth, &error).empty());
  EXPECT_NE(error.find("memory bandwidth"), std::string::npos) << error;
}

}  // namespace
}  // namespace gpt::perf
