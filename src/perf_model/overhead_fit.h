// The trainer's host work per step that its kernels' microbenchmarks do not see (dispatch of each
// op, the schedule's and the data feed's work per microbatch, the host side of each communication
// call, the step's fixed work), fitted from runs of the trainer itself: perf_calibrate times a few
// steps of small "probe" layouts through the trainer's own train_step, predicts each with the
// model priced by the microbenchmarks alone (every overhead term 0), and fits the difference as
//
//   measured - predicted = per_op x ops + per_pass x passes + per_collective x collectives + per_iteration
//
// where ops, passes and collectives are what the model charges per iteration for that layout
// (Prediction::op_calls, pass_calls, collective_calls). The four terms are the cluster file's
// kernel_overhead_us, microbatch_overhead_us, collective_overhead_us and iteration_overhead_ms.
#pragma once

#include <string>
#include <vector>

namespace gpt::perf {

// One probe: the trainer's measured seconds per iteration, the model's prediction with every
// overhead term 0, and the per-iteration counts the terms multiply.
struct OverheadSample {
  std::string name;
  double measured_s = 0;
  double predicted_s = 0;
  double ops = 0, passes = 0, collectives = 0;
};

struct OverheadFit {
  double per_op_s = 0, per_pass_s = 0, per_collective_s = 0, per_iteration_s = 0;
  int samples = 0;
  // sqrt(mean((fitted - measured)^2 / measured^2)) over the samples, with and without the terms.
  double rms_relative_error = 0, rms_relative_error_before = 0;
  // The residuals before the fit: a negative one (the model already slower than the trainer)
  // says the microbenchmarks overprice some part; the terms cannot go below 0.
  double mean_relative_residual_before = 0;
};

// Least squares over the samples, each weighted by 1 / measured (relative error), with every term
// >= 0: the unconstrained fit of every subset of the four terms, the best whose terms are all
// non-negative (the empty subset, all 0, always is). A term the samples cannot tell apart from the
// others (a singular subset) is left out. Needs at least one sample with a positive measurement.
OverheadFit fit_overheads(const std::vector<OverheadSample>& samples);

}  // namespace gpt::perf
