#include "kernels/op_profile.h"

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <string_view>
#include <vector>

#include "core/scope_times.h"

namespace gpt::op_profile {
namespace {

struct Totals {
  int64_t calls = 0;
  double ms = 0.0;
};

struct OpTable {
  std::map<std::string_view, Totals> totals;
  void add(const char* op, double interval_ms) {
    Totals& t = totals[op];
    ++t.calls;
    t.ms += interval_ms;
  }
};
using Profile = ScopeTimes<const char*, OpTable>;

Profile& profile() {
  static Profile* p = [] {
    auto* created = new Profile();  // never destroyed: events may outlive static destruction order
    const char* env = std::getenv("GPT_OP_PROFILE");
    created->set_enabled(env != nullptr && std::string_view(env) == "1");
    return created;
  }();
  return *p;
}

}  // namespace

bool enabled() { return profile().enabled(); }

int64_t from_iteration() {
  static const int64_t from = [] {
    const char* env = std::getenv("GPT_OP_PROFILE_FROM");
    return env != nullptr ? std::max<int64_t>(0, std::atoll(env)) : int64_t{0};
  }();
  return from;
}

void set_enabled(bool on) { profile().set_enabled(on); }

Scope::Scope(Context& ctx, const char* op) {
  if (!enabled()) return;
  ctx_ = &ctx;
  op_ = op;
  mark_ = profile().start(ctx);
}

Scope::~Scope() {
  if (ctx_ != nullptr) profile().stop(*ctx_, mark_, op_);
}

void reset() {
  profile().with_table([](OpTable& table) { table.totals.clear(); });
}

std::string report(int64_t iterations, double step_ms) {
  std::vector<std::pair<std::string_view, Totals>> rows = profile().with_table([](const OpTable& table) {
    return std::vector<std::pair<std::string_view, Totals>>(table.totals.begin(), table.totals.end());
  });
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
