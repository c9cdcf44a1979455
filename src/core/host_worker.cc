#include "core/host_worker.h"

#include <utility>

#include "core/check.h"

namespace gpt {

HostWorker::HostWorker() : thread_([this] { loop(); }) {}

HostWorker::~HostWorker() {
  {
    std::unique_lock<std::mutex> lock(mutex_);
    changed_.wait(lock, [&] { return !task_; });
    stopping_ = true;
  }
  changed_.notify_all();
  thread_.join();
}

void HostWorker::start(std::function<void()> task) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    GPT_CHECK(!task_) << "a host task started before the previous one was waited for";
    task_ = std::move(task);
  }
  changed_.notify_all();
}

void HostWorker::wait() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return !task_; });
}

void HostWorker::loop() {
  std::unique_lock<std::mutex> lock(mutex_);
  for (;;) {
    changed_.wait(lock, [&] { return stopping_ || task_; });
    if (stopping_) return;
    lock.unlock();
    task_();  // only this thread reads task_ until it is cleared below
    lock.lock();
    task_ = nullptr;
    changed_.notify_all();
  }
}

}  // namespace gpt
