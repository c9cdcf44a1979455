// Threads for the CPU reference kernels that are not BLAS calls: a small process-wide pool that
// cuts an index range into contiguous chunks (up to 8 per thread) taken dynamically by the caller
// and the workers. Which thread runs a chunk never changes what is computed: callers make every
// index's result independent of the chunking (no cross-chunk reductions in thread order), so
// results do not depend on the thread count.
#pragma once

#include <cstdint>

#include "core/context.h"

namespace gpt::cpu {

// Calls fn(begin, end) on contiguous ranges covering [0, n), each of at least `grain` indices
// (fewer only when n < grain), on up to ctx.cpu_threads() threads (the caller's included). Runs inline when n < 2 * grain (too little work to split), when the
// context has one thread, or when another caller holds the pool (kernels may be called from
// several threads at once; they then share the cores by running serially).
template <typename Fn>
void parallel_for(Context& ctx, int64_t n, int64_t grain, Fn&& fn);

namespace detail {
using RangeFn = void (*)(void* state, int64_t begin, int64_t end);
// Returns false (and runs nothing) when the pool is taken or threads == 1.
bool run_on_pool(int threads, int64_t n, int64_t grain, RangeFn fn, void* state);
}  // namespace detail

template <typename Fn>
void parallel_for(Context& ctx, int64_t n, int64_t grain, Fn&& fn) {
  if (n <= 0) return;
  const int threads = ctx.cpu_threads();
  if (threads > 1 && n >= 2 * (grain < 1 ? 1 : grain)) {
    auto call = [](void* state, int64_t begin, int64_t end) { (*static_cast<Fn*>(state))(begin, end); };
    if (detail::run_on_pool(threads, n, grain < 1 ? 1 : grain, call, &fn)) return;
  }
  fn(int64_t{0}, n);
}

}  // namespace gpt::cpu
