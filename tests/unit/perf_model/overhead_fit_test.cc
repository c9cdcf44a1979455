// perf_model/overhead_fit: the host-overhead terms are recovered from synthetic trainer probes, never
// go below 0, ignore what the probes cannot tell apart, and reach the cluster file (calibration.h).
#include "perf_model/overhead_fit.h"

#include <gtest/gtest.h>

#include "perf_model/calibration.h"
#include "perf_model/cluster.h"
#include "unit/perf_model/perf_model_fixtures.h"

namespace gpt::perf {
namespace {

// Probes shaped like perf_calibrate's (ops, passes, communication calls), the model's prediction
// `predicted`, measured = predicted + the given terms, times (1 + noise_i).
std::vector<OverheadSample> probes(double per_op, double per_pass, double per_collective, double per_iteration,
                                   std::vector<double> noise = {}) {
  const struct {
    double predicted, ops, passes, collectives;
  } shapes[] = {{9e-3, 40, 2, 2}, {20e-3, 102, 2, 2}, {28e-3, 160, 8, 2},
                {31e-3, 160, 8, 17}, {66e-3, 408, 8, 27}, {32e-3, 176, 8, 37}};
  std::vector<OverheadSample> samples;
  size_t i = 0;
  for (const auto& s : shapes) {
    const double scale = i < noise.size() ? 1 + noise[i] : 1;
    ++i;
    const double measured =
        (s.predicted + per_op * s.ops + per_pass * s.passes + per_collective * s.collectives + per_iteration) * scale;
    samples.push_back({"probe", measured, s.predicted, s.ops, s.passes, s.collectives});
  }
  return samples;
}

TEST(OverheadFit, RecoversTheFourTerms) {
  const OverheadFit fit = fit_overheads(probes(20e-6, 300e-6, 150e-6, 1e-3));
  EXPECT_EQ(fit.samples, 6);
  EXPECT_NEAR(fit.per_op_s, 20e-6, 1e-10);
  EXPECT_NEAR(fit.per_pass_s, 300e-6, 1e-9);
  EXPECT_NEAR(fit.per_collective_s, 150e-6, 1e-9);
  EXPECT_NEAR(fit.per_iteration_s, 1e-3, 1e-8);
  EXPECT_LT(fit.rms_relative_error, 1e-9);
  EXPECT_GT(fit.rms_relative_error_before, 0.1);
  EXPECT_GT(fit.mean_relative_residual_before, 0.1);  // the trainer was slower than the microbenchmarks say
}

TEST(OverheadFit, TermsNeverGoBelowZero) {
  // The model already overprices communication: an unconstrained fit would give the calls a
  // negative cost; the constrained one leaves them at 0 and keeps the others close.
  const OverheadFit fit = fit_overheads(probes(20e-6, 0, -100e-6, 0));
  EXPECT_GE(fit.per_op_s, 0);
  EXPECT_GE(fit.per_pass_s, 0);
  EXPECT_EQ(fit.per_collective_s, 0);
  EXPECT_GE(fit.per_iteration_s, 0);
  EXPECT_LT(fit.rms_relative_error, fit.rms_relative_error_before);
}

TEST(OverheadFit, NoOverheadGivesZeroAndNoiseStaysClose) {
  const OverheadFit none = fit_overheads(probes(0, 0, 0, 0));
  EXPECT_EQ(none.per_op_s + none.per_pass_s + none.per_collective_s + none.per_iteration_s, 0);
  // 2% noise: the per-op term (the largest share of the difference) within 25%.
  const OverheadFit noisy = fit_overheads(probes(30e-6, 0, 0, 0, {0.02, -0.02, 0.01, -0.01, 0.02, -0.02}));
  EXPECT_NEAR(noisy.per_op_s, 30e-6, 7.5e-6);
}

TEST(OverheadFit, ProbesThatCannotTellTermsApartFitWhatTheyCan) {
  // Every probe alike: one equation; the fit explains it with one term and stays non-negative.
  std::vector<OverheadSample> same(3, {"same", 12e-3, 10e-3, 40, 2, 2});
  const OverheadFit fit = fit_overheads(same);
  EXPECT_NEAR(fit.per_op_s * 40 + fit.per_pass_s * 2 + fit.per_collective_s * 2 + fit.per_iteration_s, 2e-3, 1e-9);
  EXPECT_EQ(fit_overheads({}).samples, 0);
  EXPECT_EQ(fit_overheads({{"unmeasured", 0, 1e-3, 1, 1, 1}}).samples, 0);
}

TEST(OverheadFit, ClusterFileCarriesTheFittedTermsAndTheProbes) {
  CalibrationResult r = test_calibration();
  r.collectives = {{"all_reduce", 2, 4096, 2e-4}, {"all_reduce", 2, 1 << 20, 1e-3}};
  std::string error;
  // Without probes every overhead key is 0 (the model priced by the microbenchmarks alone).
  absl::StatusOr<Cluster> bare = parse_cluster(cluster_file_text(r, &error), "bare.conf");
  ASSERT_TRUE(bare.ok()) << bare.status();
  EXPECT_EQ(bare->kernel_overhead + bare->microbatch_overhead + bare->collective_overhead + bare->iteration_overhead, 0);
  r.probes = probes(20e-6, 300e-6, 150e-6, 1e-3);
  r.overhead = fit_overheads(r.probes);
  const std::string text = cluster_file_text(r, &error);
  absl::StatusOr<Cluster> fitted = parse_cluster(text, "fitted.conf");
  ASSERT_TRUE(fitted.ok()) << fitted.status();
  EXPECT_NEAR(fitted->kernel_overhead, 20e-6, 1e-8);
  EXPECT_NEAR(fitted->microbatch_overhead, 300e-6, 1e-7);
  EXPECT_NEAR(fitted->collective_overhead, 150e-6, 1e-7);
  EXPECT_NEAR(fitted->iteration_overhead, 1e-3, 1e-6);
  EXPECT_NE(text.find("# Trainer probes"), std::string::npos);
}

}  // namespace
}  // namespace gpt::perf
