#include "core/phase_timer.h"

namespace gpt::phase_timer {
namespace {

struct PhaseTable {
  std::array<double, kPhases> ms{};
  void add(Phase phase, double interval_ms) { ms[static_cast<size_t>(phase)] += interval_ms; }
};
using Timers = ScopeTimes<Phase, PhaseTable>;

Timers& timers() {
  static Timers* t = new Timers();  // never destroyed: events may outlive static destruction order
  return *t;
}

}  // namespace

const char* name(Phase phase) {
  switch (phase) {
    case Phase::kForwardCompute: return "forward-compute";
    case Phase::kBackwardCompute: return "backward-compute";
    case Phase::kBatchGenerator: return "batch-generator";
    case Phase::kPipelineSendRecv: return "pipeline-send-recv";
    case Phase::kTensorParallelComm: return "tp-comm";
    case Phase::kParamsAllGather: return "params-all-gather";
    case Phase::kCount: break;
  }
  return "?";
}

bool enabled() { return timers().enabled(); }

void set_enabled(bool on) { timers().set_enabled(on); }

Scope::Scope(Context& ctx, Phase phase) {
  if (!enabled()) return;
  ctx_ = &ctx;
  phase_ = phase;
  mark_ = timers().start(ctx);
}

Scope::~Scope() {
  if (ctx_ != nullptr) timers().stop(*ctx_, mark_, phase_);
}

std::array<double, kPhases> take() {
  return timers().with_table([](PhaseTable& table) {
    const std::array<double, kPhases> out = table.ms;
    table.ms = {};
    return out;
  });
}

}  // namespace gpt::phase_timer
