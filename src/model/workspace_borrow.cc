#include "model/workspace_borrow.h"

#include <algorithm>
#include <cstdint>
#include <vector>

namespace gpt {
#ifdef GPT_WORKSPACE_BORROWS_CHECKED
namespace {

struct Held {
  uintptr_t begin = 0, end = 0;
  const char* holder = nullptr;
};

// The borrows live on this thread (each rank's passes run on one thread; the CPU tests run ranks
// as threads of one process).
std::vector<Held>& held() {
  thread_local std::vector<Held> borrows;
  return borrows;
}

uintptr_t begin_of(const Tensor& t) { return reinterpret_cast<uintptr_t>(t.data()); }

}  // namespace

void Borrow::acquire(const char* holder) {
  const uintptr_t begin = begin_of(buffer_), end = begin + buffer_.bytes();
  for (const Held& other : held()) {
    GPT_CHECK(end <= other.begin || other.end <= begin)
        << holder << " borrows workspace bytes that " << other.holder << " still holds";
  }
  held().push_back({begin, end, holder});
}

void Borrow::release() {
  std::vector<Held>& borrows = held();
  const uintptr_t begin = begin_of(buffer_), end = begin + buffer_.bytes();
  const auto it = std::find_if(borrows.rbegin(), borrows.rend(),
                               [&](const Held& h) { return h.begin == begin && h.end == end; });
  GPT_CHECK(it != borrows.rend()) << "a workspace borrow given back that was never taken";
  borrows.erase(std::next(it).base());
}

#endif
}  // namespace gpt
