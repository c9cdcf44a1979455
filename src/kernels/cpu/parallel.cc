#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace gpt::cpu::detail {
namespace {

// A job is cut into fixed chunks (their bounds depend on n and grain only) that the caller and the
// workers take from an atomic counter until none is left. On a machine shared with other
// processes a worker may be scheduled late or not at all during the job: the caller then takes
// the chunks itself instead of waiting for it, and waits only for chunks already started.
class Pool {
 public:
  bool run(int threads, int64_t n, int64_t grain, RangeFn fn, void* state) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    const int64_t chunks = std::min<int64_t>(n / grain, 8 * static_cast<int64_t>(threads));
    if (chunks < 2) return false;
    ensure_workers(threads - 1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = fn;
      state_ = state;
      n_ = n;
      chunks_ = chunks;
      next_.store(0, std::memory_order_relaxed);
      open_ = true;
      wanted_ = threads - 1;  // workers that may join this job
      ++generation_;
    }
    wake_.notify_all();
    take_chunks();
    std::unique_lock<std::mutex> lock(mutex_);
    open_ = false;  // a worker waking from now on leaves this job alone
    done_.wait(lock, [&] { return active_ == 0; });
    return true;
  }

 private:
  void take_chunks() {
    for (int64_t c = next_.fetch_add(1, std::memory_order_relaxed); c < chunks_;
         c = next_.fetch_add(1, std::memory_order_relaxed)) {
      fn_(state_, n_ * c / chunks_, n_ * (c + 1) / chunks_);
    }
  }

  void ensure_workers(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      // generation_ changes only under busy_, which the caller holds: the worker starts from the
      // generation before this job's.
      workers_.emplace_back([this, seen = generation_] { work(seen); });
    }
  }

  void work(uint64_t seen) {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (!open_ || wanted_ == 0) continue;
        --wanted_;
        ++active_;
      }
      take_chunks();
      std::lock_guard<std::mutex> lock(mutex_);
      if (--active_ == 0) done_.notify_one();
    }
  }

  std::mutex busy_;   // held by the caller for the whole job
  std::mutex mutex_;  // guards the fields below (next_ aside)
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  RangeFn fn_ = nullptr;
  void* state_ = nullptr;
  int64_t n_ = 0, chunks_ = 0;
  std::atomic<int64_t> next_{0};
  bool open_ = false;
  int wanted_ = 0, active_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace

bool run_on_pool(int threads, int64_t n, int64_t grain, RangeFn fn, void* state) {
  // Never destroyed: its workers sleep until the process exits (no exit-time ordering issues).
  static Pool* pool = new Pool;
  return pool->run(threads, n, grain, fn, state);
}

}  // namespace gpt::cpu::detail
