// Megatron's rerun state machine (megatron/core/rerun_state_machine.py), its in-place stage:
// --rerun-mode validate_results checks every iteration's local loss (each rank's, before the
// data-parallel reduction) after forward-backward: a NaN or Inf (fatal), or with
// --check-for-spiky-loss a loss at least 10 times the largest of the first 100 (not fatal). A
// rejected result reruns the same iteration on the same data (the data order, the dropout masks
// and the initialisation are functions of the seed and the coordinates, so the rerun computes the
// same numbers unless the hardware erred):
//   - not reproduced: a transient fault. Fatal: save and exit with Megatron's
//     EXIT_CODE_FAILED_ON_RESULT_VALIDATION (17) so that the scheduler can replace the node; not
//     fatal: continue with the rerun's result.
//   - reproduced: the data or the numerics; the iteration and its samples are reported. Fatal:
//     save and exit with Megatron's EXIT_CODE_RESUME_TO_DISAMBIGUATE (16), or, with
//     --no-check-for-nan-in-loss-and-grad, skip the iteration's update and go on; not fatal: go on.
// The checkpoint holds the state before the iteration, so a resumed job trains it again.
// Megatron's second stage (the resumed job rerunning the iteration on another GPU with the machine's
// state from the checkpoint) is not implemented: a resumed job validates the iteration afresh.
// --rerun-mode report_stats reruns every iteration and reports, every --log-interval iterations,
// the largest relative difference of the loss between the two runs (0 here: the computation is
// deterministic). The first iteration of a run is not validated (Megatron's rule).
//
// Test hook: GPT_RERUN_FAULT=<iteration>:<world rank>[:persistent|:spike] makes that rank's local
// loss NaN in that iteration's first run (transient), in its rerun too (persistent), or 1e6 times
// larger in the first run (a transient spike).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "parallel/process_grid.h"
#include "train/arguments.h"

namespace gpt {

// Megatron's exit codes (megatron/core/rerun_state_machine.py).
inline constexpr int kExitCodeResumeToDisambiguate = 16;
inline constexpr int kExitCodeFailedOnResultValidation = 17;

// What the iteration does after the check.
struct RerunDecision {
  enum class Next { kApply, kSkipUpdate, kSaveAndExit } next = Next::kApply;
  int exit_code = 0;    // with kSaveAndExit
  std::string reason;   // with kSaveAndExit: Megatron's message
};

// The trainer's side of a check: rerun the iteration's forward-backward, and read or change this
// rank's local loss (the mean token loss of its microbatches; nullopt on ranks without the loss).
struct RerunHooks {
  std::function<void()> rerun_forward_backward;
  std::function<std::optional<double>()> local_loss;
  std::function<void(float factor_or_nan)> corrupt_local_loss;  // NaN: set it NaN; else multiply
};

class RerunCheck {
 public:
  // nullptr when neither --rerun-mode nor --check-for-spiky-loss asks for checks.
  static std::unique_ptr<RerunCheck> create(const Arguments& args, ProcessGrid& grid);

  // After the iteration's forward-backward (the iteration to be counted as `iteration`, 1-based),
  // before the optimizer step; `consumed_samples` before it. Collective.
  RerunDecision check(int64_t iteration, int64_t consumed_samples, const RerunHooks& hooks);
  // --rerun-mode report_stats: rank 0 prints the determinism statistics gathered since the last
  // call (collective).
  void report_stats();

 private:
  RerunCheck(const Arguments& args, ProcessGrid& grid) : args_(args), grid_(grid) {}
  // The validation that fails on this rank ("" if none), from its local loss.
  std::string rejection(std::optional<double> loss);
  void maybe_inject(int64_t iteration, bool rerun, const RerunHooks& hooks) const;

  const Arguments& args_;
  ProcessGrid& grid_;
  bool first_iteration_done_ = false;
  int64_t loss_samples_ = 0;   // spiky loss: losses seen so far, up to 100
  double max_loss_ = 0.0;      // the largest of them
  double stats_max_difference_ = 0.0;
  int64_t stats_reruns_ = 0;
};

// A run that ends on purpose with `exit_code` (no "error:" line; rank 0 prints `reason`): the
// launcher returns the code from every rank.
absl::Status requested_exit(int exit_code, const std::string& reason);
std::optional<int> requested_exit_code(const absl::Status& status);

}  // namespace gpt
