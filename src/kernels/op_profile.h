// Per-op time breakdown of training steps (the benchmark's per-kernel table). Off unless the
// environment sets GPT_OP_PROFILE=1: then every op of kernels/ops.h records CUDA events around its
// work on the context's stream (wall time on the CPU backend), and report() sums the device time
// per op. Events are recorded, not waited for, so the stream is not serialized; the host pays a
// few microseconds per op, so throughput figures come from runs without profiling.
#pragma once

#include <cstdint>
#include <string>

#include "core/context.h"
#include "core/scope_times.h"

namespace gpt::op_profile {

// True when GPT_OP_PROFILE=1 was set (read once), or after set_enabled(true).
bool enabled();
void set_enabled(bool on);
// GPT_OP_PROFILE_FROM: the first iteration (1-based) to profile when profiling should start late,
// after iterations whose timing must not include profiling; 0 when unset.
int64_t from_iteration();

// Times the op named `op` (a string literal) from construction to destruction.
class Scope {
 public:
  Scope(Context& ctx, const char* op);
  ~Scope();
  Scope(const Scope&) = delete;
  Scope& operator=(const Scope&) = delete;

 private:
  Context* ctx_ = nullptr;
  const char* op_ = nullptr;
  ScopeMark mark_;
};

// Forgets what was recorded so far (call after warm-up iterations).
void reset();
// A markdown table: per op, calls and device milliseconds per iteration over `iterations`
// iterations, and its share of `step_ms` (the measured time of one iteration; the remainder is
// shown as time outside the ops: communication, launch gaps, host work). Waits for the events.
std::string report(int64_t iterations, double step_ms);

}  // namespace gpt::op_profile
