// Time per phase of the training step, for --timing-log-level 2 (Megatron's level-2 timers):
// forward and backward compute, the data loader, pipeline sends and receives (the bubble as each
// stage sees it), tensor-parallel collectives and the wait for the distributed optimizer's
// parameter all-gather. Off unless enabled; a Scope then records CUDA events around the phase's
// work on the context's stream (device time, read without serializing the stream until take()),
// or the wall clock on the CPU backend, where work is synchronous.
//
// Phases nest as in Megatron: forward-compute includes the batch generator and the tensor-parallel
// collectives inside the layers; each phase's time is its own total, so shares do not add up to
// the step.
#pragma once

#include <array>
#include <cstdint>

#include "core/context.h"
#include "core/scope_times.h"

namespace gpt::phase_timer {

enum class Phase : int {
  kForwardCompute,
  kBackwardCompute,
  kBatchGenerator,
  kPipelineSendRecv,
  kTensorParallelComm,
  kParamsAllGather,
  kCount
};
constexpr int kPhases = static_cast<int>(Phase::kCount);

// Megatron's timer names where it has the phase ("forward-compute", "params-all-gather", ...),
// "pipeline-send-recv" for its forward-recv / backward-send / ... family (one batched exchange
// here), "tp-comm" for the tensor-parallel collectives (Megatron has no timer of its own for them).
const char* name(Phase phase);

bool enabled();
void set_enabled(bool on);

class Scope {
 public:
  Scope(Context& ctx, Phase phase);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Context* ctx_ = nullptr;
  Phase phase_ = Phase::kCount;
  ScopeMark mark_;
};

// Milliseconds per phase since the last take() (waits for the recorded GPU work), and forgets them.
std::array<double, kPhases> take();

}  // namespace gpt::phase_timer
