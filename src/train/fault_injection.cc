#include "train/fault_injection.h"

#include <csignal>
#include <cstdio>
#include <cstdlib>
#include <string>

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

bool corruption_requested(const char* point, int world_rank) {
  const char* fault = std::getenv("GPT_CHECKPOINT_FAULT");
  return fault != nullptr && std::string(fault) == absl::StrCat(point, ":", world_rank, ":corrupt");
}

}  // namespace gpt
