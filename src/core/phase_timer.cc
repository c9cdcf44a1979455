#include "core/phase_timer.h"

#include <chrono>
#include <mutex>
#include <vector>

#include "core/device_intervals.h"

namespace gpt::phase_timer {
namespace {

// GPU intervals stay pending (recorded, not read) until take().
struct Timers {
  std::mutex mutex;
  bool on = false;
  std::array<double, kPhases> ms{};
  DeviceIntervals intervals;
  struct Pending {
    Phase phase;
    int slot;
  };
  std::vector<Pending> pending;

  void harvest() {
    for (const Pending& p : pending) ms[static_cast<size_t>(p.phase)] += intervals.take_ms(p.slot);
    pending.clear();
  }
};

Timers& timers() {
  static Timers* t = new Timers();  // never destroyed: events may outlive static destruction order
  return *t;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
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

bool enabled() { return timers().on; }

void set_enabled(bool on) {
  std::lock_guard<std::mutex> lock(timers().mutex);
  timers().on = on;
}

Scope::Scope(Context& ctx, Phase phase) {
  if (!enabled()) return;
  ctx_ = &ctx;
  phase_ = phase;
  if (ctx.device() == Device::kCuda) {
    Timers& t = timers();
    std::lock_guard<std::mutex> lock(t.mutex);
    if (t.pending.size() >= 4096) t.harvest();  // bounds the event pool
    slot_ = t.intervals.start(ctx);
  } else {
    start_ns_ = now_ns();
  }
}

Scope::~Scope() {
  if (ctx_ == nullptr) return;
  Timers& t = timers();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (slot_ >= 0) {
    t.intervals.stop(*ctx_, slot_);
    t.pending.push_back({phase_, slot_});
  } else {
    t.ms[static_cast<size_t>(phase_)] += static_cast<double>(now_ns() - start_ns_) / 1e6;
  }
}

std::array<double, kPhases> take() {
  Timers& t = timers();
  std::lock_guard<std::mutex> lock(t.mutex);
  t.harvest();
  const std::array<double, kPhases> out = t.ms;
  t.ms = {};
  return out;
}

}  // namespace gpt::phase_timer
