// One persistent host thread that runs tasks one at a time, for work that overlaps the caller's
// own (the offloaded optimizer's host step while the copy stream moves the next part). Starting a
// std::thread per task would cost a thread creation and teardown at every training step.
#pragma once

#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace gpt {

class HostWorker {
 public:
  HostWorker();
  ~HostWorker();  // waits for the task in flight
  HostWorker(const HostWorker&) = delete;
  HostWorker& operator=(const HostWorker&) = delete;

  // Starts `task` on the worker; the previous task must have been waited for.
  void start(std::function<void()> task);
  // Returns once the started task has finished (at once when none is in flight).
  void wait();

 private:
  void loop();
  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> task_;  // set while a task is pending or running
  bool stopping_ = false;
  std::thread thread_;  // last: starts once the members above exist
};

}  // namespace gpt
