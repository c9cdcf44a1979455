#include "kernels/op_profile.h"

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <mutex>
#include <string_view>
#include <vector>

#include "core/device_intervals.h"

namespace gpt::op_profile {
namespace {

struct Totals {
  int64_t calls = 0;
  double ms = 0.0;
};

// GPU intervals stay pending (recorded, not read) until the next harvest, which happens when
// many are pending and at report().
struct Profile {
  std::mutex mutex;
  bool on = false;
  std::map<std::string_view, Totals> totals;
  DeviceIntervals intervals;
  struct Pending {
    const char* op;
    int slot;
  };
  std::vector<Pending> pending;

  void harvest() {
    for (const Pending& p : pending) {
      Totals& t = totals[p.op];
      ++t.calls;
      t.ms += intervals.take_ms(p.slot);
    }
    pending.clear();
  }
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
    Profile& p = profile();
    std::lock_guard<std::mutex> lock(p.mutex);
    if (p.pending.size() >= 4096) p.harvest();  // bounds the event pool
    slot_ = p.intervals.start(ctx);
  } else {
    start_ns_ = now_ns();
  }
}

Scope::~Scope() {
  if (ctx_ == nullptr) return;
  Profile& p = profile();
  std::lock_guard<std::mutex> lock(p.mutex);
  if (slot_ >= 0) {
    p.intervals.stop(*ctx_, slot_);
    p.pending.push_back({op_, slot_});
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
