#include "core/device_intervals.h"

#include <utility>
#include <vector>

#include "core/check.h"
#ifdef GPT_WITH_CUDA
#include "core/cuda_check.h"
#include "core/cuda_device_context.cuh"
#endif

namespace gpt {

#ifdef GPT_WITH_CUDA
struct DeviceIntervals::Pool {
  std::vector<std::pair<cudaEvent_t, cudaEvent_t>> events;
  std::vector<int> free_slots;
};

DeviceIntervals::Pool& DeviceIntervals::pool() {
  if (pool_ == nullptr) pool_ = new Pool();
  return *pool_;
}

int DeviceIntervals::start(Context& ctx) {
  Pool& p = pool();
  int slot;
  if (p.free_slots.empty()) {
    cudaEvent_t start, end;
    GPT_CUDA_CHECK(cudaEventCreate(&start));
    GPT_CUDA_CHECK(cudaEventCreate(&end));
    p.events.emplace_back(start, end);
    slot = static_cast<int>(p.events.size()) - 1;
  } else {
    slot = p.free_slots.back();
    p.free_slots.pop_back();
  }
  GPT_CUDA_CHECK(cudaEventRecord(p.events[static_cast<size_t>(slot)].first, ctx.cuda().stream()));
  return slot;
}

void DeviceIntervals::stop(Context& ctx, int slot) {
  GPT_CUDA_CHECK(cudaEventRecord(pool().events[static_cast<size_t>(slot)].second, ctx.cuda().stream()));
}

double DeviceIntervals::take_ms(int slot) {
  Pool& p = pool();
  const auto& [start, end] = p.events[static_cast<size_t>(slot)];
  GPT_CUDA_CHECK(cudaEventSynchronize(end));
  float ms = 0.0f;
  GPT_CUDA_CHECK(cudaEventElapsedTime(&ms, start, end));
  p.free_slots.push_back(slot);
  return ms;
}

size_t DeviceIntervals::pairs() const { return pool_ == nullptr ? 0 : pool_->events.size(); }
#else
struct DeviceIntervals::Pool {};

DeviceIntervals::Pool& DeviceIntervals::pool() {
  if (pool_ == nullptr) pool_ = new Pool();
  return *pool_;
}
int DeviceIntervals::start(Context&) {
  GPT_FATAL() << "device intervals without the CUDA backend";
  return -1;
}
void DeviceIntervals::stop(Context&, int) { GPT_FATAL() << "device intervals without the CUDA backend"; }
double DeviceIntervals::take_ms(int) {
  GPT_FATAL() << "device intervals without the CUDA backend";
  return 0.0;
}
size_t DeviceIntervals::pairs() const { return 0; }
#endif

}  // namespace gpt
