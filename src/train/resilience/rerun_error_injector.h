// Megatron's RerunErrorInjector (megatron/core/rerun_state_machine.py), driven by
// --error-injection-rate and --error-injection-type with --rerun-mode validate_results.
//
// Megatron validates each microbatch's loss on the last pipeline stage, in this order: NaN and Inf
// (fatal; unless --no-check-for-nan-in-loss-and-grad), then with --check-for-spiky-loss the spike
// (not fatal). In the initial run of an iteration (not the first of a run), until a result is
// rejected, each validation call is rejected regardless of its value with probability
// 1/error_injection_rate (Megatron: (randint(0, rate - 1) + rank) % rate == 0). The injected type
// then decides the comparisons that follow, whatever the results are:
//   transient_error   the first rerun (in place) differs: a transient fault;
//   persistent_error  the first rerun matches, the second (resumed from the checkpoint on another
//                     device) differs: a persistent fault of the first device;
//   correct_result    both reruns match: the result was correct (an application error).
// While an injection waits for its comparisons no other is drawn (Megatron's injected_error_type):
// after a non-fatal (spike) injection of a persistent or correct result that never reaches a
// second rerun, no further injection happens in that run (as in Megatron). The injection pending
// at a save travels in the checkpoint (rerun/injected), as Megatron's error_injector_checkpoint.
//
// The draws here are a hash of --seed, the world rank, the iteration and the call (Megatron draws
// from Python's random, whose state its checkpoints keep): the same run draws the same injections,
// and a job resumed from a checkpoint draws the iteration's again.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

namespace gpt {

class RerunErrorInjector {
 public:
  // `rate` 0: no injection. `type`: correct_result, transient_error or persistent_error (validated
  // by validate_rerun_arguments).
  RerunErrorInjector(int64_t rate, std::string_view type, int64_t seed, int world_rank);

  bool enabled() const { return rate_ > 0; }
  // One validation call of an iteration's initial run, `call` its 0-based index in the iteration:
  // whether to reject its result. Prints Megatron's "Injecting error type ..." line when it does.
  bool maybe_inject(int64_t iteration, int64_t call);
  // Megatron's maybe_miscompare for the first rerun (in place) and the second (from the checkpoint):
  // whether the results count as different; `differs` is the real comparison, used when nothing
  // was injected.
  bool first_rerun_differs(bool differs);
  bool second_rerun_differs(bool differs);

  // The injection waiting for its comparisons: "" or its type (for the checkpoint records).
  const std::string& pending() const { return pending_; }
  void set_pending(std::string type) { pending_ = std::move(type); }

 private:
  int64_t rate_;
  std::string type_;
  int64_t seed_;
  int rank_;
  std::string pending_;
};

}  // namespace gpt
