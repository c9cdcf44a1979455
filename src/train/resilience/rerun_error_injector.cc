#include "train/resilience/rerun_error_injector.h"

#include <cstdio>

#include "core/check.h"

namespace gpt {
namespace {

// SplitMix64's finaliser: a well-mixed 64-bit value of the draw's coordinates.
uint64_t mix(uint64_t x) {
  x += 0x9e3779b97f4a7c15ULL;
  x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9ULL;
  x = (x ^ (x >> 27)) * 0x94d049bb133111ebULL;
  return x ^ (x >> 31);
}

// Megatron's _ERROR_NAMES.
const char* error_name(const std::string& type) {
  if (type == "correct_result") return "Expected result";
  if (type == "transient_error") return "Transient error";
  return "Persistent error";
}

}  // namespace

RerunErrorInjector::RerunErrorInjector(int64_t rate, std::string_view type, int64_t seed, int world_rank)
    : rate_(rate), type_(type), seed_(seed), rank_(world_rank) {
  GPT_CHECK(rate >= 0) << "error injection rate " << rate;
  GPT_CHECK(type_ == "correct_result" || type_ == "transient_error" || type_ == "persistent_error")
      << "error injection type " << type_;
}

bool RerunErrorInjector::maybe_inject(int64_t iteration, int64_t call) {
  if (rate_ <= 0 || !pending_.empty()) return false;
  const uint64_t draw = mix(mix(mix(static_cast<uint64_t>(seed_)) ^ static_cast<uint64_t>(rank_)) ^
                            mix(static_cast<uint64_t>(iteration) * 0x100000001b3ULL + static_cast<uint64_t>(call)));
  if (draw % static_cast<uint64_t>(rate_) != 0) return false;
  pending_ = type_;
  std::fprintf(stderr, "Injecting error type %s\n", error_name(type_));
  std::fflush(stderr);
  return true;
}

bool RerunErrorInjector::first_rerun_differs(bool differs) {
  if (pending_.empty()) return differs;
  if (pending_ == "transient_error") {
    pending_.clear();
    return true;
  }
  return false;  // persistent or correct: reproduced in place
}

bool RerunErrorInjector::second_rerun_differs(bool differs) {
  if (pending_.empty()) return differs;
  const bool persistent = pending_ == "persistent_error";
  GPT_CHECK(persistent || pending_ == "correct_result") << "a transient injection reached the second rerun";
  pending_.clear();
  return persistent;
}

}  // namespace gpt
