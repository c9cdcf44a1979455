#include "kernels/op_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <vector>

#include "core/check.h"
#ifdef GPT_WITH_CUDA
#include "core/cuda_check.h"
#include "core/cuda_device_context.cuh"
#endif

namespace gpt::op_profile {
namespace {

struct Totals {
  int64_t calls = 0;
  double ms = 0.0;
};

// Event pairs are recycled: a pair recorded but not yet read stays pending until the next
// harvest, which happens when the pool runs dry and at report().
struct Profile {
  std::mutex mutex;
  bool on = false;
  std::map<std::string_view, Totals> totals;
#ifdef GPT_WITH_CUDA
  struct Pending {
    const char* op;
    int slot;
  };
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events;
  std::vector<int> free_slots;
  std::vector<Pending> pending;

  void harvest() {
    for (const Pending& p : pending) {
      const auto& [start, end] = events[static_cast<size_t>(p.slot)];
      GPT_CUDA_CHECK(cudaEventSynchronize(end));
      float ms = 0.0f;
      GPT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
      Totals& t = totals[p.op];
      ++t.calls;
      t.ms += ms;
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

Profile& profile() {
  static Profile* p = [] {
    auto* created = new Profile();  // never destroyed: events may outlive static destruction order
    const char* env = std::getenv("GPT_OP_PROFILE");
    created->on = env != nullptr && std::string_view(env) == "1";
    return created;
  }();
  return *p;
}

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

}  // namespace

bool enabled() { return profile().on; }

int64_t from_iteration() {
  static const int64_t from = [] {
    const char* env = std::getenv("GPT_OP_PROFILE_FROM");
    return env != nullptr ? std::max<int64_t>(0, std::atoll(env)) : int64_t{0};
  }();
  return from;
}

void set_enabled(bool on) {
  std::lock_guard<std::mutex> lock(profile().mutex);
  profile().on = on;
}

Scope::Scope(Context& ctx, const char* op) {
  if (!enabled()) return;
  ctx_ = &ctx;
  op_ = op;
  if (ctx.device() == Device::kCuda) {
#ifdef GPT_WITH_CUDA
    Profile& p = profile();
    std::lock_guard<std::mutex> lock(p.mutex);
    slot_ = p.acquire();
    GPT_CUDA_CHECK(cudaEventRecord(p.events[static_cast<size_t>(slot_)].first, ctx.cuda().stream()));
#endif
  } else {
    start_ns_ = now_ns();
  }
}

Scope::~Scope() {
  if (ctx_ == nullptr) return;
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (slot_ >= 0) {
#ifdef GPT_WITH_CUDA
    GPT_CUDA_CHECK(cudaEventRecord(p.events[static_cast<size_t>(slot_)].second, ctx_->cuda().stream()));
    p.pending.push_back({op_, slot_});
#endif
  } else {
    Totals& t = p.totals[op_];
    ++t.calls;
    t.ms += static_cast<double>(now_ns() - start_ns_) / 1e6;
  }
}

void reset() {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.harvest();
  p.totals.clear();
}

std::string report(int64_t iterations, double step_ms) {
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mutex);
  p.harvest();
  std::vector<std::pair<std::string_view, Totals>> rows(p.totals.begin(), p.totals.end());
  std::sort(rows.begin(), rows.end(), [](const auto& a, const auto& b) { return a.second.ms > b.second.ms; });
  const double n = static_cast<double>(std::max<int64_t>(1, iterations));
  std::string out = "| op | calls / iteration | ms / iteration | share of step |\n|---|---|---|---|\n";
  char line[256];
  double covered = 0.0;
  for (const auto& [op, t] : rows) {
    covered += t.ms / n;
    std::snprintf(line, sizeof(line), "| %s | %.0f | %.3f | %.1f%% |\n", std::string(op).c_str(),
                  static_cast<double>(t.calls) / n, t.ms / n, step_ms > 0 ? 100.0 * t.ms / n / step_ms : 0.0);
    out += line;
  }
  std::snprintf(line, sizeof(line), "| outside the ops (communication, launch gaps, host) | | %.3f | %.1f%% |\n",
                step_ms - covered, step_ms > 0 ? 100.0 * (step_ms - covered) / step_ms : 0.0);
  out += line;
  std::snprintf(line, sizeof(line), "| step (measured) | | %.3f | 100%% |\n", step_ms);
  out += line;
  return out;
}

}  // namespace gpt::op_profile
