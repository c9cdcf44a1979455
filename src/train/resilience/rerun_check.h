// Megatron's rerun state machine (megatron/core/rerun_state_machine.py), its in-place stage:
// --rerun-mode validate_results checks every iteration's local loss (each rank's, before the
// data-parallel reduction) after forward-backward: a NaN or Inf (fatal), or with
// --check-for-spiky-loss a loss at least 10 times the largest of the first 100 (not fatal). A
// rejected result reruns the same iteration on the same data (the data order, the dropout masks
// and the initialisation are functions of the seed and the coordinates, so the rerun computes the
// same numbers unless the hardware erred):
//   - not reproduced: a transient fault. Fatal: exit with Megatron's
//     EXIT_CODE_FAILED_ON_RESULT_VALIDATION (17) without a save (Megatron's since its commit
//     0b5e3ae: the job resumes from its last checkpoint) so that the scheduler can replace the
//     node; not fatal: continue with the rerun's result.
//   - reproduced: the data or the numerics; the iteration and its samples are reported. Fatal:
//     save and exit with Megatron's EXIT_CODE_RESUME_TO_DISAMBIGUATE (16), or, with
//     --no-check-for-nan-in-loss-and-grad, skip the iteration's update and go on; not fatal: go on.
// The checkpoint of exit 16 holds the state before the iteration, so a resumed job trains it again;
// it also holds the machine's state (checkpoint records: the iteration, the failing rank, its
// node and node-local rank, its result), and the resumed job runs Megatron's second stage on that
// iteration: the failing rank's position on the same node and device again: exit 16 without a save
// ("rescheduled on the same GPU"); on another one, the same result: likely correct, an application
// error (exit 17); a different result: a persistent fault of the first device (exit 17). The
// second stage needs the same world size (the failing rank's data is its world rank's).
// --rerun-mode report_stats reruns every iteration and reports, every --log-interval iterations,
// the largest relative difference of the loss between the two runs (0 here: the computation is
// deterministic). The first iteration of a run is not validated (Megatron's rule).
//
// --error-injection-rate / --error-injection-type: Megatron's injected rejections and the
// comparisons they dictate (train/resilience/rerun_error_injector.h); the injection waiting for the second
// stage is a checkpoint record (rerun/injected).
//
// Test hook: GPT_RERUN_FAULT=<iteration>:<world rank>[:persistent|:spike] makes that rank's local
// loss NaN in that iteration's first run (transient), in its rerun and second stage too
// (persistent), or 1e6 times larger in the first run (a transient spike).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>

#include "core/status.h"
#include "parallel/process_grid.h"
#include "train/args/arguments.h"
#include "train/checkpoint_records.h"
#include "train/resilience/rerun_error_injector.h"

namespace gpt {

// Megatron's exit codes (megatron/core/rerun_state_machine.py).
inline constexpr int kExitCodeResumeToDisambiguate = 16;
inline constexpr int kExitCodeFailedOnResultValidation = 17;

// What the iteration does after the check.
struct RerunDecision {
  enum class Next { kApply, kSkipUpdate, kSaveAndExit } next = Next::kApply;
  int exit_code = 0;    // with kSaveAndExit
  std::string reason;   // with kSaveAndExit: Megatron's message
  bool save = true;     // with kSaveAndExit: false when the checkpoint to resume from exists
};

// The trainer's side of a check: rerun the iteration's forward-backward, and read or change this
// rank's local loss (the mean token loss of its microbatches; nullopt on ranks without the loss).
struct RerunHooks {
  std::function<void()> rerun_forward_backward;
  std::function<std::optional<double>()> local_loss;
  std::function<void(float factor_or_nan)> corrupt_local_loss;  // NaN: set it NaN; else multiply
  int64_t microbatches = 1;  // this iteration's (Megatron validates each one's loss: error injection draws)
};

class RerunCheck : public CheckpointRecords {
 public:
  // nullptr when neither --rerun-mode nor --check-for-spiky-loss asks for checks.
  static std::unique_ptr<RerunCheck> create(const Arguments& args, ProcessGrid& grid);

  // After the iteration's forward-backward (the iteration to be counted as `iteration`, 1-based),
  // before the optimizer step; `consumed_samples` before it, `global_batch_size` its batch.
  // Collective.
  RerunDecision check(int64_t iteration, int64_t consumed_samples, int64_t global_batch_size, const RerunHooks& hooks);
  // --rerun-mode report_stats: rank 0 prints the determinism statistics gathered since the last
  // call (collective).
  void report_stats();

  // The machine's state for the second stage (train/checkpoint_records.h; rank 0's is saved).
  void save_records(std::map<std::string, std::string>& records) const override;
  absl::Status load_records(const std::map<std::string, std::string>& records) override;

 private:
  // The state an exit 16 leaves for the resumed job.
  struct Suspect {
    int64_t iteration = 0;  // 0: none
    int world_size = 0;
    int rank = 0;
    std::string node;
    int device = 0;          // node-local rank
    std::string result;      // the rejected local loss, %.17g ("nan", "inf")
    std::string injected;    // the failing rank's pending injection ("": none)
  };
  RerunDecision second_stage(int64_t iteration, const RerunHooks& hooks);
  // The failing rank's node, device and result on rank 0 (collective).
  void remember_suspect(int64_t iteration, int failing, std::optional<double> result);

  RerunCheck(const Arguments& args, ProcessGrid& grid)
      : args_(args), grid_(grid),
        injector_(args.error_injection_rate, args.error_injection_type, args.seed, grid.world_rank()) {}
  // The validation that fails on this rank ("" if none), from its local loss.
  std::string rejection(std::optional<double> loss);
  // The message of the validation call the injector rejects in this iteration's initial run ("" if
  // none) and its invocation (1-based, per message, as Megatron's: the microbatch).
  std::string injected_rejection(int64_t iteration, const RerunHooks& hooks, int64_t& invocation);
  void maybe_inject(int64_t iteration, bool rerun, const RerunHooks& hooks) const;

  const Arguments& args_;
  ProcessGrid& grid_;
  bool first_iteration_done_ = false;
  int64_t loss_samples_ = 0;   // spiky loss: losses seen so far, up to 100
  double max_loss_ = 0.0;      // the largest of them
  double stats_max_difference_ = 0.0;
  int64_t stats_reruns_ = 0;
  Suspect suspect_;
  RerunErrorInjector injector_;
};

// A run that ends on purpose with `exit_code` (no "error:" line; rank 0 prints `reason`): the
// launcher returns the code from every rank.
// `save`: whether the state before the iteration is to be saved first.
absl::Status requested_exit(int exit_code, const std::string& reason, bool save);
std::optional<int> requested_exit_code(const absl::Status& status);
bool requested_exit_saves(const absl::Status& status);

}  // namespace gpt
