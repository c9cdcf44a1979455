#include "model/lease.h"

#include <cstdlib>
#include <cstring>

#include "core/check.h"
#include "kernels/ops.h"

namespace gpt {

bool poison_released_leases() {
#ifndef NDEBUG
  return true;
#else
  static const bool poison = [] {
    const char* value = std::getenv("GPT_POISON_LEASES");
    return value != nullptr && std::strcmp(value, "1") == 0;
  }();
  return poison;
#endif
}

LeaseRing::LeaseRing(std::string owner, std::vector<std::pair<DType, Shape>> parts, int depth, Arena& arena)
    : owner_(std::move(owner)) {
  GPT_CHECK_GE(depth, 0) << "lease depth of " << owner_;
  sets_.resize(static_cast<size_t>(depth));
  for (std::vector<Tensor>& set : sets_) {
    for (const auto& [dtype, shape] : parts) set.push_back(arena.allocate(dtype, shape));
  }
}

int64_t LeaseRing::bytes(const std::vector<std::pair<DType, Shape>>& parts, int depth) {
  int64_t total = 0;
  for (const auto& [dtype, shape] : parts) total += Arena::aligned_bytes(dtype, shape);
  return total * depth;
}

const std::vector<Tensor>& LeaseRing::acquire() {
  GPT_CHECK_LT(held_, depth()) << owner_ << ": all " << depth()
                               << " leases are held (a pass ran before the one that gives its lease back)";
  const int index = (next_ + held_) % depth();
  ++held_;
  return sets_[static_cast<size_t>(index)];
}

const std::vector<Tensor>& LeaseRing::oldest() const {
  GPT_CHECK_GT(held_, 0) << owner_ << ": no lease is held";
  return sets_[static_cast<size_t>(next_)];
}

void LeaseRing::release(Context& ctx) {
  GPT_CHECK_GT(held_, 0) << owner_ << ": a lease given back that was never taken";
  if (poison_released_leases()) {
    for (const Tensor& tensor : sets_[static_cast<size_t>(next_)]) ops::poison(ctx, tensor);
  }
  next_ = (next_ + 1) % depth();
  --held_;
}

}  // namespace gpt
