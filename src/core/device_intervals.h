// Intervals of GPU work timed with CUDA event pairs recorded on a context's stream: recording
// does not wait, so the stream is not serialized; reading an interval waits for its end event.
// Pairs are pooled and reused. The per-op profile (kernels/op_profile.h) and the phase timers
// (core/phase_timer.h) keep what each interval was and read them in batches. Without the CUDA
// backend there are no intervals to take (a fatal check).
#pragma once

#include <cstddef>

#include "core/context.h"

namespace gpt {

class DeviceIntervals {
 public:
  DeviceIntervals() = default;
  DeviceIntervals(const DeviceIntervals&) = delete;
  DeviceIntervals& operator=(const DeviceIntervals&) = delete;

  // Records an interval's start on ctx's stream; returns its slot.
  int start(Context& ctx);
  // Records the end of the interval in `slot`.
  void stop(Context& ctx, int slot);
  // Milliseconds between the slot's two events (waits for the end event); frees the slot.
  double take_ms(int slot);
  // Event pairs created so far (in use or free).
  size_t pairs() const;

 private:
  struct Pool;
  Pool* pool_ = nullptr;  // never freed: events may outlive static destruction order
  Pool& pool();
};

}  // namespace gpt
