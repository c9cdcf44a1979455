#include "parallel/comm/communicator.h"

#include "core/check.h"

namespace gpt {

CollectiveHandle& CollectiveHandle::operator=(CollectiveHandle&& other) noexcept {
  if (this == &other) return *this;
  GPT_CHECK(pending_ == nullptr) << pending_->describe() << " was overwritten before it was waited on";
  pending_ = std::move(other.pending_);
  return *this;
}

CollectiveHandle::~CollectiveHandle() {
  GPT_CHECK(pending_ == nullptr) << pending_->describe() << " was started but never waited on";
}

void CollectiveHandle::wait(Context& ctx) {
  if (pending_ == nullptr) return;
  // Released first, so a fatal error inside wait() does not report it again from the destructor.
  std::unique_ptr<PendingCollective> pending = std::move(pending_);
  pending->wait(ctx);
}

}  // namespace gpt
