// Wall-clock timing for the log line and benchmarks. GPU work is timed by synchronizing the
// context before reading the clock (Context::synchronize), so host timers measure device time too.
#pragma once

#include <chrono>

namespace gpt {

class Stopwatch {
 public:
  Stopwatch() : start_(Clock::now()) {}
  void restart() { start_ = Clock::now(); }
  double elapsed_seconds() const { return std::chrono::duration<double>(Clock::now() - start_).count(); }

 private:
  using Clock = std::chrono::steady_clock;
  Clock::time_point start_;
};

}  // namespace gpt
