#include "train/resilience/fault_injection.h"

#include <chrono>
#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <thread>

#include "absl/strings/str_cat.h"

namespace gpt {

void maybe_inject_fault(const char* point, int world_rank) {
  const char* fault = std::getenv("GPT_CHECKPOINT_FAULT");
  if (fault == nullptr) return;
  const std::string here = absl::StrCat(point, ":", world_rank);
  const bool stop = std::string(fault) == here + ":stop";
  if (!stop && std::string(fault) != here) return;
  std::fprintf(stderr, "GPT_CHECKPOINT_FAULT: rank %d %s at %s\n", world_rank, stop ? "stopped" : "killed", point);
  std::fflush(stderr);
  std::raise(stop ? SIGSTOP : SIGKILL);
}

bool gradient_fault_at(int64_t iteration, int world_rank) {
  const char* fault = std::getenv("GPT_GRADIENT_FAULT");
  return fault != nullptr && std::string(fault) == absl::StrCat(iteration, ":", world_rank);
}

void maybe_inject_delay(int world_rank) {
  const char* delay = std::getenv("GPT_INJECT_DELAY");
  if (delay == nullptr) return;
  char* end = nullptr;
  const long milliseconds = std::strtol(delay, &end, 10);
  if (*end == ':' && std::strtol(end + 1, nullptr, 10) != world_rank) return;
  if (milliseconds > 0) std::this_thread::sleep_for(std::chrono::milliseconds(milliseconds));
}

bool corruption_requested(const char* point, int world_rank) {
  const char* fault = std::getenv("GPT_CHECKPOINT_FAULT");
  return fault != nullptr && std::string(fault) == absl::StrCat(point, ":", world_rank, ":corrupt");
}

}  // namespace gpt
