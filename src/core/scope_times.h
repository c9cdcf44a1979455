// Times scopes of work into a table keyed by Key: the recorder the phase timers (core/phase_timer.h)
// and the per-op profile (kernels/op_profile.h) share. On the CUDA backend a scope is an event pair
// around its work on the context's stream (DeviceIntervals: recorded, not read, so the stream is
// not serialized; the intervals stay pending until the next harvest, which happens when many are
// pending and when the table is read); on the CPU backend, where work is synchronous, the wall
// clock. Each finished interval's milliseconds go to the table's add(key, ms), under the
// recorder's lock.
#pragma once

#include <chrono>
#include <cstdint>
#include <mutex>
#include <vector>

#include "core/context.h"
#include "core/device_intervals.h"

namespace gpt {

// Where a scope's interval started: an event pair (GPU) or the wall clock (CPU).
struct ScopeMark {
  int slot = -1;
  int64_t start_ns = 0;
};

// Table: a type with add(Key, double ms).
template <typename Key, typename Table>
class ScopeTimes {
 public:
  // Read without the lock, as a flag checked at every op.
  bool enabled() const { return on_; }
  void set_enabled(bool on) {
    std::lock_guard<std::mutex> lock(mutex_);
    on_ = on;
  }

  ScopeMark start(Context& ctx) {
    ScopeMark mark;
    if (ctx.device() == Device::kCuda) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (pending_.size() >= 4096) harvest();  // bounds the event pool
      mark.slot = intervals_.start(ctx);
    } else {
      mark.start_ns = now_ns();
    }
    return mark;
  }

  void stop(Context& ctx, const ScopeMark& mark, Key key) {
    std::lock_guard<std::mutex> lock(mutex_);
    if (mark.slot >= 0) {
      intervals_.stop(ctx, mark.slot);
      pending_.push_back({key, mark.slot});
    } else {
      table_.add(key, static_cast<double>(now_ns() - mark.start_ns) / 1e6);
    }
  }

  // fn(table) under the lock, after the pending intervals are added (waits for their events).
  template <typename Fn>
  auto with_table(Fn&& fn) {
    std::lock_guard<std::mutex> lock(mutex_);
    harvest();
    return fn(table_);
  }

 private:
  struct Pending {
    Key key;
    int slot;
  };

  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }

  void harvest() {
    for (const Pending& p : pending_) table_.add(p.key, intervals_.take_ms(p.slot));
    pending_.clear();
  }

  std::mutex mutex_;
  bool on_ = false;
  Table table_;
  DeviceIntervals intervals_;
  std::vector<Pending> pending_;
};

}  // namespace gpt
