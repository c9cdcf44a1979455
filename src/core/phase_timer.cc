#include "core/phase_timer.h"

#include <chrono>
#include <mutex>
#include <vector>

#include "core/check.h"
#ifdef GPT_WITH_CUDA
#include "core/cuda_check.h"
#include "core/cuda_device_context.cuh"
#endif

namespace gpt::phase_timer {
namespace {

// Event pairs are recycled: a pair recorded and not yet read stays pending until take().
struct Timers {
  std::mutex mutex;
  bool on = false;
  std::array<double, kPhases> ms{};
#ifdef GPT_WITH_CUDA
  struct Pending {
    Phase phase;
    int slot;
  };
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events;
  std::vector<int> free_slots;
  std::vector<Pending> pending;

  void harvest() {
    for (const Pending& p : pending) {
      const auto& [start, end] = events[static_cast<size_t>(p.slot)];
      GPT_CUDA_CHECK(cudaEventSynchronize(end));
      float elapsed = 0.0f;
      GPT_CUDA_CHECK(cudaEventElapsedTime(&elapsed, start, end));
      ms[static_cast<size_t>(p.phase)] += elapsed;
      free_slots.push_back(p.slot);
    }
    pending.clear();
  }
  int acquire() {
    if (free_slots.empty() && events.size() >= 4096) harvest();
    if (free_slots.empty()) {
      cudaEvent_t start, end;
      GPT_CUDA_CHECK(cudaEventCreate(&start));
      GPT_CUDA_CHECK(cudaEventCreate(&end));
      events.emplace_back(start, end);
      return static_cast<int>(events.size()) - 1;
    }
    const int slot = free_slots.back();
    free_slots.pop_back();
    return slot;
  }
#else
  void harvest() {}
#endif
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
#ifdef GPT_WITH_CUDA
    Timers& t = timers();
    std::lock_guard<std::mutex> lock(t.mutex);
    slot_ = t.acquire();
    GPT_CUDA_CHECK(cudaEventRecord(t.events[static_cast<size_t>(slot_)].first, ctx.cuda().stream()));
#endif
  } else {
    start_ns_ = now_ns();
  }
}

Scope::~Scope() {
  if (ctx_ == nullptr) return;
  Timers& t = timers();
  std::lock_guard<std::mutex> lock(t.mutex);
  if (slot_ >= 0) {
#ifdef GPT_WITH_CUDA
    GPT_CUDA_CHECK(cudaEventRecord(t.events[static_cast<size_t>(slot_)].second, ctx_->cuda().stream()));
    t.pending.push_back({phase_, slot_});
#endif
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
