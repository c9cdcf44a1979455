#include "train/rank_agreement.h"

#include <cstdint>
#include <map>
#include <sstream>

#include "absl/strings/cord.h"
#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "absl/strings/str_split.h"
#include "core/check.h"
#include "core/philox.h"
#include "parallel/comm/world_agreement.h"
#include "train/args/argument_table.h"

namespace gpt {
namespace {

constexpr char kPeerFailure[] = "gpt/peer-failure";

int world_rank() { return world::rank(); }
int world_size() { return world::size(); }

}  // namespace

int job_world_size() { return mpi_running() ? world_size() : 1; }

// MPI is running when a launcher started this process (MpiRuntime initialized it) and it has not
// been shut down; without it the process is a world of one.
bool mpi_running() { return world::running(); }

absl::Status agree_on_setup(const absl::Status& local, absl::string_view phase) {
  if (!mpi_running()) return local;
  const int rank = world_rank(), size = world_size();
  const bool failed = !local.ok() && !is_peer_failure(local);
  const int first_failure =
      static_cast<int>(world::all_reduce(failed ? rank : size, world::Combine::kMin, absl::StrCat(phase, " status")));
  if (first_failure == size) return local;  // OK everywhere (a peer failure was agreed earlier)
  if (!local.ok()) return local;
  return peer_failure(phase, first_failure);
}

absl::Status peer_failure(absl::string_view phase, int rank) {
  absl::Status peer =
      absl::AbortedError(absl::StrCat(phase, " failed on rank ", rank, " (its message is printed by that rank)"));
  peer.SetPayload(kPeerFailure, absl::Cord("1"));
  return peer;
}

bool is_peer_failure(const absl::Status& status) { return status.GetPayload(kPeerFailure).has_value(); }

std::string canonical_arguments(const Arguments& a) {
  // Every argument (train/args/argument_table.h) except which flags were spelled out, which does not
  // change the run when the values agree.
  std::ostringstream out;
  for (const ArgumentEntry& entry : argument_table(a)) out << entry.flag << " " << entry.canonical << "\n";
  return out.str();
}

std::vector<std::string> differing_arguments(const std::string& mine, const std::string& reference) {
  auto by_flag = [](const std::string& text) {
    std::map<std::string, std::string> values;
    for (absl::string_view line : absl::StrSplit(text, '\n', absl::SkipEmpty())) {
      const std::pair<std::string, std::string> kv = absl::StrSplit(line, absl::MaxSplits(' ', 1));
      values[kv.first] = kv.second;
    }
    return values;
  };
  const std::map<std::string, std::string> ours = by_flag(mine), theirs = by_flag(reference);
  std::vector<std::string> differences;
  for (const auto& [flag, value] : ours) {
    const auto other = theirs.find(flag);
    const std::string reference_value = other == theirs.end() ? "(none)" : other->second;
    if (reference_value != value) differences.push_back(absl::StrCat(flag, " ", value, " (rank 0: ", reference_value, ")"));
  }
  for (const auto& [flag, value] : theirs) {
    if (ours.count(flag) == 0) differences.push_back(absl::StrCat(flag, " (none) (rank 0: ", value, ")"));
  }
  return differences;
}

absl::Status check_same_arguments(const Arguments& args) {
  if (!mpi_running()) return absl::OkStatus();
  const int rank = world_rank(), size = world_size();
  std::string text = canonical_arguments(args);
  const uint64_t digest = fnv1a_64(text);
  const std::vector<uint64_t> digests = world::all_gather(digest, "argument digests");
  std::vector<int> differing;
  for (int r = 1; r < size; ++r) {
    if (digests[static_cast<size_t>(r)] != digests[0]) differing.push_back(r);
  }
  if (differing.empty()) return absl::OkStatus();
  // Every rank knows that some differ: rank 0's text goes to all, and each differing rank names
  // its own differences (the launcher prints the lowest one's).
  std::string reference = rank == 0 ? text : std::string();
  world::broadcast_from_rank0(reference, "rank 0's arguments");
  if (digests[static_cast<size_t>(rank)] == digests[0]) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "given different arguments from rank 0: ", absl::StrJoin(differing_arguments(text, reference), ", "),
      " (ranks that differ from rank 0: ", absl::StrJoin(differing, ", "), " of ", size,
      "; every rank must be given the same arguments)"));
}

}  // namespace gpt
