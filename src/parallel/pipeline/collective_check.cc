#include "parallel/pipeline/collective_check.h"

#include <algorithm>
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"

namespace gpt::pipeline {
namespace {

constexpr size_t kShownAround = 2;  // calls shown on each side of a divergence
constexpr size_t kShownRanks = 4;   // stuck ranks named in a deadlock message

std::string members_text(const WorldProgram::Group& group) {
  return absl::StrCat("[", absl::StrJoin(group.members, ","), "]");
}

std::string group_text(const WorldProgram& program, int g) {
  const WorldProgram::Group& group = program.groups[static_cast<size_t>(g)];
  return absl::StrCat("'", group_name(group.kind, program.grid), "' (world ranks ", members_text(group), ")");
}

// The calls `rank` issues on its group of `kind`.
std::vector<const Call*> calls_on(const WorldProgram& program, int rank, GroupKind kind) {
  std::vector<const Call*> calls;
  for (const Event& e : program.ranks[static_cast<size_t>(rank)]) {
    if (e.kind == Event::Kind::kCall && e.call.group == kind) calls.push_back(&e.call);
  }
  return calls;
}

// "a, b, [c], d" around position `at` (the bracketed one), or "... (ends after N calls)".
std::string order_around(const WorldProgram& program, const std::vector<const Call*>& calls, size_t at) {
  std::vector<std::string> shown;
  const size_t begin = at > kShownAround ? at - kShownAround : 0;
  for (size_t i = begin; i < std::min(calls.size(), at + kShownAround + 1); ++i) {
    const std::string text = to_string(*calls[i], program.grid);
    shown.push_back(i == at ? absl::StrCat("[", text, "]") : text);
  }
  if (at >= calls.size()) shown.push_back(absl::StrCat("[nothing: its ", calls.size(), " calls end]"));
  return absl::StrCat(begin > 0 ? "... " : "", absl::StrJoin(shown, ", "));
}

std::string issued(const WorldProgram& program, const std::vector<const Call*>& calls, size_t at) {
  return at < calls.size() ? to_string(*calls[at], program.grid) : "nothing (its calls have ended)";
}

// One rank's place in the simulation.
struct Runner {
  size_t next = 0;                // event index
  bool posted = false;            // the current event has been posted
  std::vector<int> target;        // for the posted kCall: {group, count the members must reach}
  std::vector<size_t> transfers;  // for the posted kTransfers: channel positions
};

struct PostedTransfer {
  int rank;
  Instruction instruction;
};

class WaitSimulation {
 public:
  WaitSimulation(const WorldProgram& program, WaitModel model)
      : program_(program), model_(model), world_(static_cast<int>(program.ranks.size())) {
    runners_.resize(static_cast<size_t>(world_));
    for (const WorldProgram::Group& group : program.groups) posted_.emplace_back(group.members.size(), 0);
    // A rank is in at most one group of each kind: its place there, by group.
    place_.resize(static_cast<size_t>(world_));
    for (size_t g = 0; g < program.groups.size(); ++g) {
      for (size_t m = 0; m < program.groups[g].members.size(); ++m) {
        place_[static_cast<size_t>(program.groups[g].members[m])].push_back({static_cast<int>(g), static_cast<int>(m)});
      }
    }
  }

  absl::Status run() {
    for (bool progress = true; progress;) {
      progress = false;
      for (int r = 0; r < world_; ++r) {
        for (;;) {
          absl::StatusOr<bool> advanced = step(r);
          if (!advanced.ok()) return advanced.status();
          if (!*advanced) break;
          progress = true;
        }
      }
    }
    return report();
  }

 private:
  int group(int rank, GroupKind kind) const {
    return program_.group_of[static_cast<size_t>(rank)][static_cast<size_t>(kind)];
  }
  int count(int g, int rank) const { return posted_[static_cast<size_t>(g)][static_cast<size_t>(place(g, rank))]; }
  bool everyone_reached(int g, int n) const {
    const std::vector<int>& counts = posted_[static_cast<size_t>(g)];
    return std::all_of(counts.begin(), counts.end(), [n](int c) { return c >= n; });
  }
  int place(int g, int rank) const {
    for (const auto& [group, at] : place_[static_cast<size_t>(rank)]) {
      if (group == g) return at;
    }
    return -1;
  }
  static int64_t channel(int sender, int receiver) { return (int64_t{sender} << 32) | static_cast<uint32_t>(receiver); }
  int world_peer(int rank, int pipeline_rank) const {
    return program_.column_rank[static_cast<size_t>(pipeline_rank)]
                               [static_cast<size_t>(program_.column_of[static_cast<size_t>(rank)])];
  }

  // Moves rank r past its current event if it can; true when it moved or posted something.
  absl::StatusOr<bool> step(int r) {
    Runner& runner = runners_[static_cast<size_t>(r)];
    const std::vector<Event>& events = program_.ranks[static_cast<size_t>(r)];
    if (runner.next == events.size()) return false;
    const Event& e = events[runner.next];
    bool posted_now = false;
    if (!runner.posted) {
      runner.posted = posted_now = true;
      if (e.kind == Event::Kind::kCall) {
        const int g = group(r, e.call.group);
        int& mine = posted_[static_cast<size_t>(g)][static_cast<size_t>(place(g, r))];
        runner.target = {g, ++mine};
      } else if (e.kind == Event::Kind::kTransfers) {
        runner.transfers.clear();
        for (const Instruction& i : e.transfers) {
          const bool send = is_send_op(i.op);
          const int peer = world_peer(r, i.peer);
          const int64_t c = send ? channel(r, peer) : channel(peer, r);
          std::vector<PostedTransfer>& mine = (send ? sends_ : receives_)[c];
          const std::vector<PostedTransfer>& theirs = (send ? receives_ : sends_)[c];
          runner.transfers.push_back(mine.size());
          mine.push_back({r, i});
          if (mine.size() <= theirs.size()) {
            const PostedTransfer& other = theirs[mine.size() - 1];
            if (other.instruction.microbatch != i.microbatch ||
                is_gradient_op(other.instruction.op) != is_gradient_op(i.op)) {
              return absl::InvalidArgumentError(
                  absl::StrCat("collective order: mismatched pipeline transfer between world ranks ", r, " (",
                               to_string(i), ") and ", peer, " (", to_string(other.instruction), ")"));
            }
          }
        }
      }
    }
    if (!complete(r, e)) return posted_now;
    ++runner.next;
    runner.posted = false;
    return true;
  }

  bool complete(int r, const Event& e) const {
    const Runner& runner = runners_[static_cast<size_t>(r)];
    switch (e.kind) {
      case Event::Kind::kCall:
        return (!e.call.blocking && model_ == WaitModel::kProgram) ||
               everyone_reached(runner.target[0], runner.target[1]);
      case Event::Kind::kTransfers:
        for (size_t t = 0; t < e.transfers.size(); ++t) {
          const Instruction& i = e.transfers[t];
          const bool send = is_send_op(i.op);
          const int peer = world_peer(r, i.peer);
          const auto& theirs = send ? receives_ : sends_;
          const auto found = theirs.find(send ? channel(r, peer) : channel(peer, r));
          if (found == theirs.end() || found->second.size() <= runner.transfers[t]) return false;
        }
        return true;
      case Event::Kind::kWaitReductions:
        for (const auto& [g, at] : place_[static_cast<size_t>(r)]) {
          if (!everyone_reached(g, posted_[static_cast<size_t>(g)][static_cast<size_t>(at)])) return false;
        }
        return true;
    }
    return true;
  }

  std::string where(int r) const {
    const Runner& runner = runners_[static_cast<size_t>(r)];
    const std::vector<Event>& events = program_.ranks[static_cast<size_t>(r)];
    if (runner.next == events.size()) return "has finished";
    const Event& e = events[runner.next];
    switch (e.kind) {
      case Event::Kind::kCall:
        return absl::StrCat("waits in ", label(e.call), " on ", group_text(program_, group(r, e.call.group)));
      case Event::Kind::kTransfers: {
        std::vector<std::string> parts;
        for (const Instruction& i : e.transfers) parts.push_back(to_string(i));
        return absl::StrCat("waits in the pipeline transfers ", absl::StrJoin(parts, " + "), " (pipeline rank ",
                            program_.pipeline_rank[static_cast<size_t>(r)], ")");
      }
      case Event::Kind::kWaitReductions:
        return "waits for its gradient reductions";
    }
    return "";
  }

  absl::Status report() const {
    std::vector<std::string> stuck;
    int more = 0;
    for (int r = 0; r < world_; ++r) {
      const Runner& runner = runners_[static_cast<size_t>(r)];
      if (runner.next == program_.ranks[static_cast<size_t>(r)].size()) continue;
      if (stuck.size() == kShownRanks) {
        ++more;
        continue;
      }
      std::string line = absl::StrCat("world rank ", r, " ", where(r));
      const Event& e = program_.ranks[static_cast<size_t>(r)][runner.next];
      if (e.kind == Event::Kind::kCall) {
        const int g = runner.target[0];
        std::vector<std::string> missing;
        for (int member : program_.groups[static_cast<size_t>(g)].members) {
          if (count(g, member) < runner.target[1])
            missing.push_back(absl::StrCat("world rank ", member, " ", where(member)));
        }
        if (!missing.empty()) absl::StrAppend(&line, " while ", absl::StrJoin(missing, " and "));
      }
      stuck.push_back(std::move(line));
    }
    if (stuck.empty()) return absl::OkStatus();
    return absl::FailedPreconditionError(
        absl::StrCat("collective deadlock", model_ == WaitModel::kStrict ? " (every collective blocking)" : "", ": ",
                     absl::StrJoin(stuck, "; "), more > 0 ? absl::StrCat("; and ", more, " more ranks") : ""));
  }

  const WorldProgram& program_;
  const WaitModel model_;
  const int world_;
  std::vector<Runner> runners_;
  std::vector<std::vector<int>> posted_;                 // [group][member place]: calls issued on the group
  std::vector<std::vector<std::pair<int, int>>> place_;  // [world rank]: (group, its place there)
  // Posted transfers by channel(sender, receiver), matched by position.
  std::map<int64_t, std::vector<PostedTransfer>> sends_, receives_;
};

}  // namespace

absl::Status check_group_orders(const WorldProgram& program) {
  for (size_t g = 0; g < program.groups.size(); ++g) {
    const WorldProgram::Group& group = program.groups[g];
    const std::vector<const Call*> reference = calls_on(program, group.members.front(), group.kind);
    for (size_t m = 1; m < group.members.size(); ++m) {
      const std::vector<const Call*> calls = calls_on(program, group.members[m], group.kind);
      size_t at = 0;
      while (at < reference.size() && at < calls.size() && *reference[at] == *calls[at]) ++at;
      if (at == reference.size() && at == calls.size()) continue;
      const int a = group.members.front(), b = group.members[m];
      return absl::FailedPreconditionError(absl::StrCat(
          "collective order: group ", group_text(program, static_cast<int>(g)), " diverges at its call ", at,
          ": world rank ", a, " issues ", issued(program, reference, at), " where world rank ", b, " issues ",
          issued(program, calls, at), "; world rank ", a, "'s order: ", order_around(program, reference, at),
          " | world rank ", b, "'s order: ", order_around(program, calls, at)));
    }
  }
  return absl::OkStatus();
}

absl::Status check_no_wait_cycle(const WorldProgram& program, WaitModel model) {
  return WaitSimulation(program, model).run();
}

absl::Status check_collective_order(const GridLayout& grid, const Schedule& schedule, const ModelLayout& model) {
  absl::StatusOr<WorldProgram> program = collective_program(grid, schedule, model);
  if (!program.ok()) return program.status();
  if (absl::Status status = check_group_orders(*program); !status.ok()) return status;
  if (absl::Status status = check_no_wait_cycle(*program, WaitModel::kProgram); !status.ok()) return status;
  return check_no_wait_cycle(*program, WaitModel::kStrict);
}

}  // namespace gpt::pipeline
