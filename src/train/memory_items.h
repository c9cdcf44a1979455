// The bytes of a rank's model state (parameters, FP32 gradients, master weights, moments) stated
// once, generic over the arithmetic: the memory plan's closed form evaluates it in overflow-checked
// int64 (CheckedBytes: a layout too large to allocate is refused with its figures real or not at
// all), the start-up memory report's theoretical column in double. The exact plan (rank_memory)
// counts the same items from the shard plan with the arena's alignment and the working buffers.
#pragma once

#include <cstdint>
#include <optional>

#include "core/checked_math.h"  // CheckedBytes

namespace gpt {

// How a rank holds its model state.
struct StateLayout {
  int64_t parameter_bytes = 4;      // per element: 2 with --bf16 / --fp16
  bool sharded_parameters = false;  // ZeRO-3: the rank holds its owned shard of the values
  bool sharded_gradients = false;   // ZeRO-2/3: and of the FP32 gradients
  bool separate_master = false;     // FP32 master weights beside 16-bit values (--bf16 / --fp16)
};

// Bytes of each item, without alignment, padding or working buffers.
template <typename T>
struct StateMemory {
  T parameters = 0, gradients = 0, master_weights = 0, moments = 0;
  T host_optimizer = 0;  // the offloaded share's master weights and moments (host memory)
  T optimizer_state() const { return master_weights + moments; }
};

// `elements`: the rank's parameter elements; `owned`: those whose optimizer state it holds
// (elements / the sharding group with the distributed optimizer), of which `device_owned` in
// device memory and `host_owned` offloaded (--optimizer-cpu-offload).
template <typename T>
StateMemory<T> state_memory(const StateLayout& layout, T elements, T owned, T device_owned, T host_owned) {
  StateMemory<T> m;
  m.parameters = T(layout.parameter_bytes) * (layout.sharded_parameters ? owned : elements);
  m.gradients = T(4) * (layout.sharded_gradients ? owned : elements);
  m.master_weights = layout.separate_master ? T(4) * device_owned : T(0);
  m.moments = T(8) * device_owned;
  m.host_optimizer = T(layout.separate_master ? 12 : 8) * host_owned;
  return m;
}

}  // namespace gpt
