#include "train/resilience/rerun_check.h"

#include <bit>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <limits>
#include <vector>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"
#include "absl/strings/str_split.h"
#include "core/logging.h"
#include "core/check.h"
#include "parallel/comm/mpi_runtime.h"
#include "parallel/comm/world_agreement.h"
#include "train/report/straggler_report.h"

namespace gpt {
namespace {

// Megatron's SPIKY_LOSS_FACTOR and is_unexpectedly_large's sample count.
constexpr double kSpikyLossFactor = 10.0;
constexpr int64_t kSpikySamples = 100;

constexpr char kRequestedExitPayload[] = "gpt.requested_exit_code";
constexpr char kRequestedSavePayload[] = "gpt.requested_exit_saves";

constexpr char kNanMessage[] = "found NaN in local forward loss calculation";
constexpr char kInfMessage[] = "found Inf in local forward loss calculation";
constexpr char kSpikyMessage[] = "Spiky loss";

// Non-negative doubles order as their bit patterns: a maximum over the world through the int64
// agreement.
int64_t as_ordered_bits(double value) {
  if (!(value >= 0.0)) value = std::numeric_limits<double>::infinity();  // NaN counts as the largest
  return std::bit_cast<int64_t>(value);
}
double from_ordered_bits(int64_t bits) { return std::bit_cast<double>(bits); }

bool same_result(double a, double b) {
  if (std::isnan(a) || std::isnan(b)) return std::isnan(a) && std::isnan(b);
  return a == b;
}

std::string value_text(std::optional<double> value) {
  return value ? absl::StrFormat("%.9g", *value) : std::string("none");
}

// "Rank R, node N, device D, iteration #I: " (Megatron's prefix; the device is the host here).
std::string where(const ProcessGrid& grid, int64_t iteration) {
  return absl::StrCat("Rank ", grid.world_rank(), ", node ", node_name(), ", iteration #", iteration, ": ");
}

}  // namespace

std::unique_ptr<RerunCheck> RerunCheck::create(const Arguments& args, ProcessGrid& grid) {
  if (args.rerun_mode == "disabled" && !args.check_for_spiky_loss) return nullptr;
  return std::unique_ptr<RerunCheck>(new RerunCheck(args, grid));
}

void RerunCheck::maybe_inject(int64_t iteration, bool rerun, const RerunHooks& hooks) const {
  const char* fault = std::getenv("GPT_RERUN_FAULT");
  if (fault == nullptr) return;
  const std::vector<std::string> parts = absl::StrSplit(fault, ':');
  if (parts.size() < 2 || std::atoll(parts[0].c_str()) != iteration || std::atoi(parts[1].c_str()) != grid_.world_rank()) {
    return;
  }
  const std::string kind = parts.size() > 2 ? parts[2] : "transient";
  if (rerun && kind != "persistent") return;
  std::fprintf(stderr, "GPT_RERUN_FAULT: rank %d, iteration %lld, %s: local loss %s\n", grid_.world_rank(),
               static_cast<long long>(iteration), rerun ? "rerun" : "first run", kind == "spike" ? "x 1e6" : "NaN");
  std::fflush(stderr);
  hooks.corrupt_local_loss(kind == "spike" ? 1e6f : std::numeric_limits<float>::quiet_NaN());
}

std::string RerunCheck::injected_rejection(int64_t iteration, const RerunHooks& hooks, int64_t& invocation) {
  if (!injector_.enabled() || !hooks.local_loss()) return "";  // Megatron validates on the last stage
  // Megatron's validation calls per microbatch, in loss_func's order.
  std::vector<const char*> calls;
  if (!args_.no_check_for_nan_in_loss_and_grad) calls = {kNanMessage, kInfMessage};
  if (args_.check_for_spiky_loss) calls.push_back(kSpikyMessage);
  int64_t call = 0;
  for (int64_t microbatch = 0; microbatch < hooks.microbatches; ++microbatch) {
    for (const char* message : calls) {
      if (injector_.maybe_inject(iteration, call++)) {
        invocation = microbatch + 1;
        return message;
      }
    }
  }
  return "";
}

std::string RerunCheck::rejection(std::optional<double> loss) {
  if (!loss) return "";
  if (std::isnan(*loss)) return kNanMessage;
  if (std::isinf(*loss)) return kInfMessage;
  if (!args_.check_for_spiky_loss) return "";
  // Megatron's is_unexpectedly_large: the largest |loss| of the first 100 is the reference.
  const double value = std::fabs(*loss);
  if (loss_samples_ < kSpikySamples) {
    ++loss_samples_;
    max_loss_ = std::max(max_loss_, value);
    return "";
  }
  return value >= max_loss_ * kSpikyLossFactor ? kSpikyMessage : "";
}

RerunDecision RerunCheck::check(int64_t iteration, int64_t consumed_samples, int64_t global_batch_size,
                                const RerunHooks& hooks) {
  const int rank = grid_.world_rank(), size = grid_.world_size();
  if (args_.rerun_mode == "report_stats") {
    const std::optional<double> first = hooks.local_loss();
    hooks.rerun_forward_backward();
    const std::optional<double> second = hooks.local_loss();
    if (first && second) {
      const double difference = same_result(*first, *second) ? 0.0 : std::fabs(*second - *first) / std::fabs(*first);
      stats_max_difference_ = std::max(stats_max_difference_, std::isnan(difference) ? INFINITY : difference);
    }
    ++stats_reruns_;
    return {};
  }
  if (suspect_.iteration != 0 && suspect_.iteration == iteration && args_.rerun_mode == "validate_results") {
    first_iteration_done_ = true;
    return second_stage(iteration, hooks);
  }
  // The first iteration of a run is not validated (a checkpoint before it may not exist yet).
  if (!first_iteration_done_) {
    first_iteration_done_ = true;
    if (args_.check_for_spiky_loss) rejection(hooks.local_loss());  // counts towards the reference
    return {};
  }
  maybe_inject(iteration, /*rerun=*/false, hooks);
  const std::optional<double> initial = hooks.local_loss();
  // Megatron's `maybe_inject() or rejection_func(result)`: an injected rejection comes first.
  int64_t invocation = 1;  // the local loss is validated once per iteration here
  std::string message = injected_rejection(iteration, hooks, invocation);
  if (message.empty()) message = rejection(initial);
  // The lowest rank whose result was rejected (size: none).
  const int failing = static_cast<int>(world::all_reduce(message.empty() ? size : rank, world::Combine::kMin,
                                                         "the rerun check's validation"));
  if (failing == size) return {};
  const bool fatal = message != kSpikyMessage;
  const bool validate = args_.rerun_mode == "validate_results";
  if (rank == failing) {
    std::fprintf(stderr, "Unexpected result %s on rank %d at iteration #%lld invocation #%lld (message='%s')\n",
                 value_text(initial).c_str(), rank, static_cast<long long>(iteration),
                 static_cast<long long>(invocation), message.c_str());
    std::fflush(stderr);
  }
  // The failing rank tells the others whether its validation was fatal.
  const bool any_fatal = world::all_reduce(rank == failing && fatal ? 1 : 0, world::Combine::kMax,
                                           "the rerun check's validation") != 0;
  if (!validate) {
    // --check-for-spiky-loss without --rerun-mode: Megatron's disabled mode warns (a NaN or Inf is
    // --check-for-nan-in-loss-and-grad's to stop).
    return {};
  }
  if (rank == 0) {
    std::printf("Need to rerun step to check reproducibility of initial result\n");
    std::fflush(stdout);
  }
  hooks.rerun_forward_backward();
  maybe_inject(iteration, /*rerun=*/true, hooks);
  const std::optional<double> rerun = hooks.local_loss();
  // Every rank that rejected a result compares (an injection decides the comparison and is then
  // done with); the lowest of them decides.
  bool differs = initial && rerun && !same_result(*initial, *rerun);
  if (!message.empty()) differs = injector_.first_rerun_differs(differs);
  const bool mismatch = rank == failing && differs;
  const bool reproduced =
      world::all_reduce(mismatch ? 1 : 0, world::Combine::kMax, "the rerun check's comparison") == 0;
  const int64_t first_sample = consumed_samples, last_sample = consumed_samples + global_batch_size;
  if (rank == failing) {
    if (!reproduced) {
      std::fprintf(stderr, "%sFirst rerun: unexpected result is not reproducible within the tolerance (%s != %s)!\n",
                   where(grid_, iteration).c_str(), value_text(rerun).c_str(), value_text(initial).c_str());
      std::fprintf(stderr, "%sPossible transient error!\n", where(grid_, iteration).c_str());
    } else {
      std::fprintf(stderr,
                   "%sFirst rerun: unexpected result is reproducible within the tolerance (%s = %s): the data or the "
                   "numerics of iteration %lld, samples [%lld, %lld) of the global batch (data-parallel rank %d's "
                   "microbatches)\n",
                   where(grid_, iteration).c_str(), value_text(rerun).c_str(), value_text(initial).c_str(),
                   static_cast<long long>(iteration), static_cast<long long>(first_sample),
                   static_cast<long long>(last_sample), grid_.coordinates().data);
    }
    std::fflush(stderr);
  }
  if (!any_fatal) {
    if (rank == 0) {
      std::printf("Continuing normal execution because failed validation was not fatal\n");
      std::fflush(stdout);
    }
    return {};
  }
  if (!reproduced) {
    return {.next = RerunDecision::Next::kSaveAndExit,
            .exit_code = kExitCodeFailedOnResultValidation,
            .reason = absl::StrCat("iteration ", iteration, ": a transient error on rank ", failing,
                                   ": Exiting now. The job can be resumed from a previous checkpoint"),
            .save = false};
  }
  if (args_.no_check_for_nan_in_loss_and_grad) {
    if (rank == 0) {
      std::printf("iteration %lld: the unexpected result is reproducible: the update is skipped "
                  "(--no-check-for-nan-in-loss-and-grad)\n",
                  static_cast<long long>(iteration));
      std::fflush(stdout);
    }
    return {.next = RerunDecision::Next::kSkipUpdate};
  }
  remember_suspect(iteration, failing, initial);
  return {.next = RerunDecision::Next::kSaveAndExit,
          .exit_code = kExitCodeResumeToDisambiguate,
          .reason = absl::StrCat("iteration ", iteration, ": the unexpected result of rank ", failing,
                                 " is reproducible (samples [", first_sample, ", ", last_sample,
                                 ")): saving a checkpoint and exiting now. Please resume the job from the checkpoint "
                                 "to rerun the last iteration and establish a diagnostic")};
}

void RerunCheck::remember_suspect(int64_t iteration, int failing, std::optional<double> result) {
  const std::string mine = absl::StrCat(node_name(), "\n", local_rank(), "\n",
                                        result ? absl::StrFormat("%.17g", *result) : std::string("none"), "\n",
                                        injector_.pending());
  const std::vector<std::string> all = world::gather_to_rank0(mine, "the rerun check's suspect");
  if (grid_.world_rank() != 0) return;
  const std::vector<std::string> parts = absl::StrSplit(all[static_cast<size_t>(failing)], '\n');
  GPT_CHECK_EQ(parts.size(), 4u) << "suspect entry of rank " << failing;
  suspect_ = {.iteration = iteration, .world_size = grid_.world_size(), .rank = failing, .node = parts[0],
              .device = std::atoi(parts[1].c_str()), .result = parts[2], .injected = parts[3]};
}

RerunDecision RerunCheck::second_stage(int64_t iteration, const RerunHooks& hooks) {
  const Suspect suspect = suspect_;
  suspect_ = {};
  const int rank = grid_.world_rank();
  if (suspect.world_size != grid_.world_size()) {
    if (rank == 0) {
      std::printf("iteration %lld was left to rerun from the checkpoint on %d ranks; this run has %d, so rank %d's "
                  "data is not where it was: the iteration is validated afresh\n",
                  static_cast<long long>(iteration), suspect.world_size, grid_.world_size(), suspect.rank);
      std::fflush(stdout);
    }
    return {};
  }
  if (rank == 0) {
    std::printf("Getting RerunStateMachine state from checkpoint. Will rerun step %lld.\n",
                static_cast<long long>(iteration));
    std::fflush(stdout);
  }
  maybe_inject(iteration, /*rerun=*/true, hooks);  // a persistent fault again
  // The failing rank's verdict: 1 same device, 2 reproduced on another, 3 not reproduced.
  int verdict = 0;
  if (rank == suspect.rank) {
    const std::optional<double> result = hooks.local_loss();
    const std::string now = result ? absl::StrFormat("%.17g", *result) : std::string("none");
    // Megatron compares (the injection deciding, and done with) before it looks at the device.
    injector_.set_pending(suspect.injected);
    const bool differs = injector_.second_rerun_differs(now != suspect.result);
    if (node_name() == suspect.node && local_rank() == suspect.device) {
      verdict = 1;
      std::fprintf(stderr,
                   "Got rescheduled on the same GPU. Need to resume again from the same checkpoint (node: %s, "
                   "gpu: %d)\n",
                   suspect.node.c_str(), suspect.device);
    } else if (!differs) {
      verdict = 2;
      std::fprintf(stderr,
                   "Second rerun: unexpected result is reproducible on a different GPU, therefore it was likely "
                   "correct (%s = %s)\n%sCorrect result (but possible Application error) (iteration %lld)!\n",
                   now.c_str(), suspect.result.c_str(), where(grid_, iteration).c_str(),
                   static_cast<long long>(iteration));
    } else {
      verdict = 3;
      std::fprintf(stderr,
                   "Second rerun: unexpected result is not reproducible on a different GPU, therefore was likely "
                   "incorrect (%s != %s)\n%sPossible persistent error! (node %s, gpu %d)\n",
                   now.c_str(), suspect.result.c_str(), where(grid_, iteration).c_str(), suspect.node.c_str(),
                   suspect.device);
    }
    std::fflush(stderr);
  }
  verdict = static_cast<int>(world::all_reduce(verdict, world::Combine::kMax, "the rerun check's second stage"));
  if (verdict == 1) {
    suspect_ = suspect;  // still to be disambiguated
    return {.next = RerunDecision::Next::kSaveAndExit,
            .exit_code = kExitCodeResumeToDisambiguate,
            .reason = "Exiting now. Please resume the job from the same checkpoint to rerun the last iteration and "
                      "establish a diagnostic",
            .save = false};
  }
  return {.next = RerunDecision::Next::kSaveAndExit,
          .exit_code = kExitCodeFailedOnResultValidation,
          .reason = absl::StrCat("iteration ", iteration, ": ",
                                 verdict == 2 ? "the result of rank " : "a persistent fault on the first device of rank ",
                                 suspect.rank, verdict == 2 ? " is correct on another device (an application error)"
                                                            : "",
                                 ": exiting now. A checkpoint at the last iteration already exists if further "
                                 "examination is needed"),
          .save = false};
}

void RerunCheck::save_records(std::map<std::string, std::string>& records) const {
  records["rerun/iteration"] = absl::StrCat(suspect_.iteration);
  if (suspect_.iteration == 0) return;
  records["rerun/world_size"] = absl::StrCat(suspect_.world_size);
  records["rerun/rank"] = absl::StrCat(suspect_.rank);
  records["rerun/node"] = suspect_.node;
  records["rerun/device"] = absl::StrCat(suspect_.device);
  records["rerun/result"] = suspect_.result;
  records["rerun/injected"] = suspect_.injected;
}

absl::Status RerunCheck::load_records(const std::map<std::string, std::string>& records) {
  suspect_ = {};
  const auto iteration = records.find("rerun/iteration");
  if (iteration == records.end() || iteration->second == "0") return absl::OkStatus();  // nothing pending
  for (const char* key : {"rerun/world_size", "rerun/rank", "rerun/node", "rerun/device", "rerun/result"}) {
    if (!records.contains(key)) return absl::DataLossError(absl::StrCat("checkpoint record ", key, " is missing"));
  }
  suspect_ = {.iteration = std::atoll(iteration->second.c_str()),
              .world_size = std::atoi(records.at("rerun/world_size").c_str()),
              .rank = std::atoi(records.at("rerun/rank").c_str()),
              .node = records.at("rerun/node"),
              .device = std::atoi(records.at("rerun/device").c_str()),
              .result = records.at("rerun/result"),
              // Absent in checkpoints from before error injection: nothing injected.
              .injected = records.contains("rerun/injected") ? records.at("rerun/injected") : std::string()};
  return absl::OkStatus();
}

void RerunCheck::report_stats() {
  if (args_.rerun_mode != "report_stats") return;
  const double largest = from_ordered_bits(
      world::all_reduce(as_ordered_bits(stats_max_difference_), world::Combine::kMax, "the determinism statistics"));
  if (grid_.world_rank() == 0) {
    std::printf("Stats on computation determinism in validation calls\n  loss: %lld reruns, largest relative "
                "difference %.3e\n",
                static_cast<long long>(stats_reruns_), largest);
    std::fflush(stdout);
  }
  stats_max_difference_ = 0.0;
  stats_reruns_ = 0;
}

absl::Status requested_exit(int exit_code, const std::string& reason, bool save) {
  absl::Status status = absl::AbortedError(reason);
  status.SetPayload(kRequestedExitPayload, absl::Cord(absl::StrCat(exit_code)));
  if (save) status.SetPayload(kRequestedSavePayload, absl::Cord("1"));
  return status;
}

bool requested_exit_saves(const absl::Status& status) {
  return status.GetPayload(kRequestedSavePayload).has_value();
}

std::optional<int> requested_exit_code(const absl::Status& status) {
  const auto payload = status.GetPayload(kRequestedExitPayload);  // absl::optional<absl::Cord>
  if (!payload) return std::nullopt;
  return std::atoi(std::string(*payload).c_str());
}

}  // namespace gpt
