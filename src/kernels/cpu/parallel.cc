#include "kernels/cpu/parallel.h"

#include <algorithm>
#include <condition_variable>
#include <mutex>
#include <thread>
#include <vector>

namespace gpt::cpu::detail {
namespace {

// Workers sleep on a condition variable between jobs. One job at a time (guarded by `busy`);
// a job is split into `pieces` ranges taken by the caller and the workers.
class Pool {
 public:
  bool run(int threads, int64_t n, int64_t grain, RangeFn fn, void* state) {
    std::unique_lock<std::mutex> busy(busy_, std::try_to_lock);
    if (!busy.owns_lock()) return false;
    const int64_t pieces = std::min<int64_t>(threads, n / grain);
    if (pieces < 2) return false;
    ensure_workers(static_cast<int>(pieces) - 1);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      fn_ = fn;
      state_ = state;
      n_ = n;
      pieces_ = pieces;
      remaining_ = pieces - 1;
      ++generation_;
    }
    wake_.notify_all();
    run_piece(0);
    std::unique_lock<std::mutex> lock(mutex_);
    done_.wait(lock, [&] { return remaining_ == 0; });
    return true;
  }

 private:
  void run_piece(int64_t piece) {
    const int64_t begin = n_ * piece / pieces_, end = n_ * (piece + 1) / pieces_;
    if (begin < end) fn_(state_, begin, end);
  }

  void ensure_workers(int count) {
    while (static_cast<int>(workers_.size()) < count) {
      const int64_t index = static_cast<int64_t>(workers_.size()) + 1;  // piece index it serves
      // generation_ changes only under busy_, which the caller holds: the worker starts from the
      // generation before this job's.
      workers_.emplace_back([this, index, seen = generation_] { work(index, seen); });
    }
  }

  void work(int64_t piece, uint64_t seen) {
    for (;;) {
      {
        std::unique_lock<std::mutex> lock(mutex_);
        wake_.wait(lock, [&] { return generation_ != seen; });
        seen = generation_;
        if (piece >= pieces_) continue;  // a job with fewer pieces than workers
      }
      run_piece(piece);
      std::lock_guard<std::mutex> lock(mutex_);
      if (--remaining_ == 0) done_.notify_one();
    }
  }

  std::mutex busy_;   // held by the caller for the whole job
  std::mutex mutex_;  // guards the fields below
  std::condition_variable wake_, done_;
  std::vector<std::thread> workers_;
  RangeFn fn_ = nullptr;
  void* state_ = nullptr;
  int64_t n_ = 0, pieces_ = 0, remaining_ = 0;
  uint64_t generation_ = 0;
};

}  // namespace

bool run_on_pool(int threads, int64_t n, int64_t grain, RangeFn fn, void* state) {
  // Never destroyed: its workers sleep until the process exits (no exit-time ordering issues).
  static Pool* pool = new Pool;
  return pool->run(threads, n, grain, fn, state);
}

}  // namespace gpt::cpu::detail
