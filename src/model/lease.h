// Buffers a module keeps from one of its passes to a later one, with an owner and a lifetime: a
// lease is taken by the pass that fills it and given back by the pass that last reads it. The
// motivating case is a Linear's weight-gradient pass run after the whole chunk's input-gradient
// passes (zero-bubble schedules): what it reads (its input and its output gradient) lives in
// scratch that the next layer's input-gradient pass reuses, so it is copied into a lease.
//
// Taking more leases than the ring holds, or giving one back out of order, is a broken invariant
// (a schedule ran passes in an order the model was not built for) and stops the process. A lease
// given back is poisoned (every byte 0xFF, a NaN) in debug builds, or with GPT_POISON_LEASES=1, so
// that a read after its lifetime shows up as NaN in the oracle and parity tests instead of reading
// stale numbers.
#pragma once

#include <cstdint>
#include <string>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "core/context.h"

namespace gpt {

// Whether released leases are poisoned: always in debug builds, else when GPT_POISON_LEASES=1.
bool poison_released_leases();

class LeaseRing {
 public:
  // `depth` sets of `parts` (dtype and shape each), allocated now from `arena`; depth 0 allocates
  // nothing and may not be acquired.
  LeaseRing(std::string owner, std::vector<std::pair<DType, Shape>> parts, int depth, Arena& arena);

  int depth() const { return static_cast<int>(sets_.size()); }
  int held() const { return held_; }
  // Bytes the ring takes from its arena (what the memory plan counts).
  static int64_t bytes(const std::vector<std::pair<DType, Shape>>& parts, int depth);

  // The oldest free set (sets are taken and given back first in, first out).
  const std::vector<Tensor>& acquire();
  // The oldest held set (the next release() gives it back).
  const std::vector<Tensor>& oldest() const;
  // Gives back the oldest held set, poisoning it when poison_released_leases().
  void release(Context& ctx);

 private:
  std::string owner_;
  std::vector<std::vector<Tensor>> sets_;
  int next_ = 0;  // the set acquire() hands out next
  int held_ = 0;
};

}  // namespace gpt
