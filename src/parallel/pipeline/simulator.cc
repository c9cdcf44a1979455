#include "parallel/pipeline/simulator.h"

#include <algorithm>
#include <cmath>
#include <set>
#include <string>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/strict_number.h"

namespace gpt::pipeline {
namespace {

// Every cost finite and >= 0, each W at most the backward it is part of (its B takes the rest), and
// the transfer time finite: a NaN would make every comparison of the schedules false, an infinity
// or a negative B a plausible but meaningless timeline.
absl::Status check_cost_values(const Costs& costs) {
  const char* names[] = {"forward", "backward", "weight-gradient"};
  const std::vector<std::vector<double>>* tables[] = {&costs.forward, &costs.backward, &costs.weight};
  for (size_t t = 0; t < 3; ++t) {
    for (size_t r = 0; r < tables[t]->size(); ++r) {
      for (size_t c = 0; c < (*tables[t])[r].size(); ++c) {
        const double value = (*tables[t])[r][c];
        if (absl::Status ok = check_number(value, NumberRange::from_to(0, std::numeric_limits<double>::max()));
            !ok.ok()) {
          return absl::InvalidArgumentError(
              absl::StrCat("pipeline costs: the ", names[t], " cost of rank ", r, " chunk ", c, " ", ok.message()));
        }
        if (t == 2 && value > costs.backward[r][c]) {
          return absl::InvalidArgumentError(absl::StrCat(
              "pipeline costs: the weight-gradient cost of rank ", r, " chunk ", c, " (", number_text(value),
              ") is more than the backward it is part of (", number_text(costs.backward[r][c]), ")"));
        }
      }
    }
  }
  const double transfer = costs.transfer_time();
  if (!std::isfinite(transfer) || transfer < 0 || !std::isfinite(costs.p2p_bytes) || costs.p2p_bandwidth < 0) {
    return absl::InvalidArgumentError(absl::StrCat("pipeline costs: the transfer time (latency ",
                                                   number_text(costs.p2p_latency), ", bytes ", number_text(costs.p2p_bytes),
                                                   ", bandwidth ", number_text(costs.p2p_bandwidth),
                                                   ") is not a finite time >= 0"));
  }
  return absl::OkStatus();
}


std::string where(int rank, size_t step, const Instruction& i) {
  return absl::StrCat("rank ", rank, " step ", step, " (", to_string(i), ")");
}

absl::Status invalid(int rank, size_t step, const Instruction& i, const std::string& why) {
  return absl::InvalidArgumentError(absl::StrCat("invalid instruction: ", where(rank, step, i), ": ", why));
}

bool training(const Schedule& schedule) {
  for (const std::vector<Step>& steps : schedule.ranks) {
    for (const Step& step : steps) {
      for (const Instruction& i : step.instructions) {
        if (is_backward_op(i.op)) return true;
      }
    }
  }
  return false;
}

absl::Status check_shape(const Schedule& s) {
  if (s.pipeline_size < 1 || s.virtual_size < 1 || s.microbatches < 1) {
    return absl::InvalidArgumentError(absl::StrCat("invalid schedule: p = ", s.pipeline_size,
                                                   ", v = ", s.virtual_size, ", m = ", s.microbatches));
  }
  if (static_cast<int>(s.ranks.size()) != s.pipeline_size) {
    return absl::InvalidArgumentError(
        absl::StrCat("invalid schedule: ", s.ranks.size(), " rank lists for pipeline size ", s.pipeline_size));
  }
  return absl::OkStatus();
}

// The step holds one compute instruction or only transfers.
absl::Status check_step(int rank, size_t index, const Step& step) {
  if (step.instructions.empty()) return absl::InvalidArgumentError(absl::StrCat("invalid step: rank ", rank, " step ", index, " is empty"));
  const bool compute = is_compute_op(step.instructions.front().op);
  for (const Instruction& i : step.instructions) {
    if (is_compute_op(i.op) != compute || (compute && step.instructions.size() > 1)) {
      return absl::InvalidArgumentError(absl::StrCat("invalid step: rank ", rank, " step ", index, " (",
                                                     to_string(step), ") mixes compute with other instructions"));
    }
  }
  return absl::OkStatus();
}

// Ranges, and that a transfer exists for this stage and names the rank of the stage at its other end.
absl::Status check_instruction(const Schedule& s, int rank, size_t step, const Instruction& i) {
  const int p = s.pipeline_size;
  if (i.chunk < 0 || i.chunk >= s.virtual_size) return invalid(rank, step, i, absl::StrCat("chunk out of 0..", s.virtual_size - 1));
  if (i.microbatch < 0 || i.microbatch >= s.microbatches) {
    return invalid(rank, step, i, absl::StrCat("microbatch out of 0..", s.microbatches - 1));
  }
  if (is_compute_op(i.op)) return i.peer == -1 ? absl::OkStatus() : invalid(rank, step, i, "compute with a peer");
  const int stage = virtual_stage(s.placement, p, rank, i.chunk);
  const bool downstream = i.op == Op::kSendActivation || i.op == Op::kReceiveGradient;
  const int other = downstream ? stage + 1 : stage - 1;
  if (other < 0 || other >= p * s.virtual_size) {
    return invalid(rank, step, i, absl::StrCat(downstream ? "the last" : "the first", " virtual stage has no ",
                                               downstream ? "next" : "previous", " stage to exchange with"));
  }
  if (i.peer == rank) return invalid(rank, step, i, "a transfer to its own rank (p = 1 runs one chunk)");
  const int other_rank = stage_location(s.placement, p, other).rank;
  if (other_rank == rank) return invalid(rank, step, i, absl::StrCat("virtual stage ", other, " is on this rank"));
  if (i.peer != other_rank) return invalid(rank, step, i, absl::StrCat("virtual stage ", other, " is on rank ", other_rank));
  return absl::OkStatus();
}

// A transfer posted on the channel from `sender` to `receiver`.
struct Posted {
  int rank;
  size_t step;
  Instruction instruction;
  double time;
};
struct Channel {
  std::vector<Posted> sends, receives;  // matched by position
};

// Whether a send and the receive it met carry the same tensor: same kind and microbatch, and the
// receiving chunk is the one after (activation) or before (gradient) the sending chunk's stage.
absl::Status check_match(Placement placement, int p, const Posted& send, const Posted& receive, size_t position) {
  const Instruction& s = send.instruction;
  const Instruction& r = receive.instruction;
  const bool gradient = s.op == Op::kSendGradient;
  const int to_stage = virtual_stage(placement, p, send.rank, s.chunk) + (gradient ? -1 : 1);
  const StageLocation to = stage_location(placement, p, to_stage);
  const Op expected = gradient ? Op::kReceiveGradient : Op::kReceiveActivation;
  if (r.op == expected && r.chunk == to.chunk && r.microbatch == s.microbatch) return absl::OkStatus();
  return absl::InvalidArgumentError(absl::StrCat(
      "mismatched transfer: message ", position, " from rank ", send.rank, " to rank ", receive.rank, ": ",
      where(send.rank, send.step, s), " sends ", gradient ? "the gradient" : "the activation", " of microbatch ",
      s.microbatch, " for chunk ", to.chunk, " but ", where(receive.rank, receive.step, r), " expects ",
      is_gradient_op(r.op) ? "the gradient" : "the activation", " of microbatch ", r.microbatch, " for chunk ",
      r.chunk));
}

}  // namespace

Costs Costs::uniform(int p, int v, double forward, double backward, double weight) {
  Costs costs;
  costs.forward.assign(static_cast<size_t>(p), std::vector<double>(static_cast<size_t>(v), forward / v));
  costs.backward.assign(static_cast<size_t>(p), std::vector<double>(static_cast<size_t>(v), backward / v));
  costs.weight.assign(static_cast<size_t>(p),
                      std::vector<double>(static_cast<size_t>(v), (weight < 0 ? backward / 2 : weight) / v));
  return costs;
}

double Costs::compute_time(Op op, int rank, int chunk) const {
  const size_t r = static_cast<size_t>(rank), c = static_cast<size_t>(chunk);
  const double fused = backward[r][c];
  const double w = weight.empty() ? fused / 2 : weight[r][c];
  switch (op) {
    case Op::kForward: return forward[r][c];
    case Op::kBackward: return fused;
    case Op::kBackwardInput: return fused - w;
    case Op::kBackwardWeight: return w;
    default: return 0;
  }
}

double Costs::transfer_time() const {
  return p2p_latency + (p2p_bandwidth > 0 ? p2p_bytes / p2p_bandwidth : 0.0);
}

absl::StatusOr<SimulationReport> simulate(const Schedule& schedule, const Costs& costs) {
  if (absl::Status status = check_shape(schedule); !status.ok()) return status;
  const int p = schedule.pipeline_size;
  const size_t ranks = static_cast<size_t>(p);
  for (const auto* table : {&costs.forward, &costs.backward, &costs.weight}) {
    if (table == &costs.weight && table->empty()) continue;
    bool sized = table->size() == ranks;
    for (const std::vector<double>& row : *table) sized = sized && static_cast<int>(row.size()) == schedule.virtual_size;
    if (!sized) return absl::InvalidArgumentError(absl::StrCat("costs must be sized [", p, "][", schedule.virtual_size, "]"));
  }
  GPT_RETURN_IF_ERROR(check_cost_values(costs));
  const bool keeps_activations = training(schedule);
  const double transfer_time = costs.transfer_time();

  SimulationReport report;
  report.ranks.resize(ranks);
  std::vector<size_t> next_step(ranks, 0);
  std::vector<double> clock(ranks, 0.0);
  // For the posted (current) transfer step of each rank: each transfer's channel and position.
  std::vector<std::vector<std::pair<Channel*, size_t>>> pending(ranks);
  std::vector<Channel> channels(ranks * ranks);  // [sender * p + receiver]
  std::vector<std::set<std::pair<int, int>>> live(ranks);

  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const size_t rr = static_cast<size_t>(r);
      const std::vector<Step>& steps = schedule.ranks[rr];
      RankTimeline& timeline = report.ranks[rr];
      while (next_step[rr] < steps.size()) {
        const size_t index = next_step[rr];
        const Step& step = steps[index];
        if (pending[rr].empty()) {
          if (absl::Status status = check_step(r, index, step); !status.ok()) return status;
          for (const Instruction& i : step.instructions) {
            if (absl::Status status = check_instruction(schedule, r, index, i); !status.ok()) return status;
          }
        }
        const Instruction& first = step.instructions.front();
        if (is_compute_op(first.op)) {
          const double cost = costs.compute_time(first.op, r, first.chunk);
          timeline.compute.push_back({first, static_cast<int>(index), clock[rr], clock[rr] + cost});
          clock[rr] += cost;
          timeline.busy += cost;
          if (keeps_activations && first.op == Op::kForward) live[rr].insert({first.chunk, first.microbatch});
          if (first.op == Op::kBackward || first.op == Op::kBackwardWeight) {
            live[rr].erase({first.chunk, first.microbatch});
          }
          timeline.peak_live = std::max(timeline.peak_live, static_cast<int>(live[rr].size()));
          ++next_step[rr];
          progress = true;
          continue;
        }
        if (pending[rr].empty()) {  // post the batch
          for (const Instruction& i : step.instructions) {
            const bool send = is_send_op(i.op);
            Channel& channel = channels[send ? rr * ranks + static_cast<size_t>(i.peer)
                                             : static_cast<size_t>(i.peer) * ranks + rr];
            std::vector<Posted>& mine = send ? channel.sends : channel.receives;
            const std::vector<Posted>& theirs = send ? channel.receives : channel.sends;
            const size_t position = mine.size();
            mine.push_back({r, index, i, clock[rr]});
            if (position < theirs.size()) {
              const Posted& s = send ? mine.back() : theirs[position];
              const Posted& q = send ? theirs[position] : mine.back();
              if (absl::Status status = check_match(schedule.placement, p, s, q, position); !status.ok()) return status;
            }
            pending[rr].push_back({&channel, position});
          }
          progress = true;
        }
        double end = clock[rr];
        bool complete = true;
        for (size_t t = 0; t < step.instructions.size() && complete; ++t) {
          const auto& [channel, position] = pending[rr][t];
          complete = position < channel->sends.size() && position < channel->receives.size();
          if (complete) {
            end = std::max(end, std::max(channel->sends[position].time, channel->receives[position].time) +
                                    transfer_time);
          }
        }
        if (!complete) break;
        clock[rr] = end;
        pending[rr].clear();
        ++next_step[rr];
        progress = true;
      }
    }
  }

  std::vector<std::string> waiting;
  for (int r = 0; r < p; ++r) {
    const size_t rr = static_cast<size_t>(r);
    if (next_step[rr] == schedule.ranks[rr].size()) continue;
    const Step& step = schedule.ranks[rr][next_step[rr]];
    std::vector<std::string> missing;
    for (size_t t = 0; t < step.instructions.size(); ++t) {
      const auto& [channel, position] = pending[rr][t];
      const Instruction& i = step.instructions[t];
      const bool send = is_send_op(i.op);
      if (position < (send ? channel->receives.size() : channel->sends.size())) continue;
      const size_t peer = static_cast<size_t>(i.peer);
      const std::string peer_state =
          next_step[peer] == schedule.ranks[peer].size()
              ? "has finished"
              : absl::StrCat("waits at step ", next_step[peer], ": ", to_string(schedule.ranks[peer][next_step[peer]]));
      missing.push_back(absl::StrCat(to_string(i), " has no matching ", send ? "receive" : "send", " (rank ", i.peer,
                                     " ", peer_state, ")"));
    }
    waiting.push_back(absl::StrCat("rank ", r, " waits at step ", next_step[rr], ": ", absl::StrJoin(missing, ", ")));
  }
  if (!waiting.empty()) {
    return absl::FailedPreconditionError(absl::StrCat("deadlock: ", absl::StrJoin(waiting, "; ")));
  }

  for (int r = 0; r < p; ++r) {
    RankTimeline& timeline = report.ranks[static_cast<size_t>(r)];
    timeline.finish = clock[static_cast<size_t>(r)];
    report.makespan = std::max(report.makespan, timeline.finish);
    report.ideal = std::max(report.ideal, timeline.busy);
  }
  // Finite costs can still add up past the largest double (1e308 each).
  if (!std::isfinite(report.makespan) || !std::isfinite(report.ideal)) {
    return absl::InvalidArgumentError(
        "pipeline costs: the simulated iteration's time overflows (the costs add up past the largest double)");
  }
  double idle = 0;
  for (RankTimeline& timeline : report.ranks) {
    timeline.idle = report.makespan - timeline.busy;
    idle += timeline.idle;
  }
  report.bubble_fraction = report.ideal > 0 ? (report.makespan - report.ideal) / report.ideal : 0.0;
  report.idle_fraction = report.makespan > 0 ? idle / p / report.makespan : 0.0;
  return report;
}

absl::Status check_schedule(const Schedule& s) {
  if (absl::Status status = check_shape(s); !status.ok()) return status;
  const int p = s.pipeline_size, v = s.virtual_size, m = s.microbatches;
  const bool with_backward = training(s);
  // A split backward counts as the backward (its B) plus a W; kFused and kWeight tell them apart.
  enum What { kForward, kBackward, kReceiveActivation, kSendActivation, kReceiveGradient, kSendGradient, kWeight,
              kFused, kWhats };
  auto what = [](Op op) {
    switch (op) {
      case Op::kForward: return kForward;
      case Op::kBackward: return kBackward;
      case Op::kBackwardInput: return kBackward;
      case Op::kBackwardWeight: return kWeight;
      case Op::kReceiveActivation: return kReceiveActivation;
      case Op::kSendActivation: return kSendActivation;
      case Op::kReceiveGradient: return kReceiveGradient;
      case Op::kSendGradient: return kSendGradient;
    }
    return kWhats;
  };
  static constexpr const char* kNames[] = {"forward", "backward", "activation receive", "activation send",
                                           "gradient receive", "gradient send", "weight-gradient pass",
                                           "fused backward"};
  for (int r = 0; r < p; ++r) {
    // [what][chunk * m + microbatch]: how often, and the step of the first occurrence.
    std::vector<std::vector<int>> count(kWhats, std::vector<int>(static_cast<size_t>(v * m), 0));
    std::vector<std::vector<size_t>> at(kWhats, std::vector<size_t>(static_cast<size_t>(v * m), 0));
    std::vector<std::vector<int>> split_order(static_cast<size_t>(v)), weight_order(static_cast<size_t>(v));
    const std::vector<Step>& steps = s.ranks[static_cast<size_t>(r)];
    for (size_t index = 0; index < steps.size(); ++index) {
      if (absl::Status status = check_step(r, index, steps[index]); !status.ok()) return status;
      for (const Instruction& i : steps[index].instructions) {
        if (absl::Status status = check_instruction(s, r, index, i); !status.ok()) return status;
        const size_t key = static_cast<size_t>(i.chunk * m + i.microbatch);
        const size_t w = static_cast<size_t>(what(i.op));
        if (count[w][key]++ == 0) at[w][key] = index;
        if (i.op == Op::kBackward && count[kFused][key]++ == 0) at[kFused][key] = index;
        // Each chunk's W passes run in the order of its B passes (the model keeps them FIFO).
        if (i.op == Op::kBackwardInput) split_order[static_cast<size_t>(i.chunk)].push_back(i.microbatch);
        if (i.op == Op::kBackwardWeight) weight_order[static_cast<size_t>(i.chunk)].push_back(i.microbatch);
      }
    }
    for (int c = 0; c < v; ++c) {
      const std::vector<int>& b = split_order[static_cast<size_t>(c)];
      const std::vector<int>& w = weight_order[static_cast<size_t>(c)];
      for (size_t n = 0; n < std::min(b.size(), w.size()); ++n) {
        if (b[n] == w[n]) continue;
        return absl::InvalidArgumentError(absl::StrCat("schedule check: rank ", r, " chunk ", c, " runs W of microbatch ",
                                                       w[n], " where its B order has microbatch ", b[n],
                                                       " (W passes run in the order of their B)"));
      }
    }
    for (int c = 0; c < v; ++c) {
      // A neighbouring stage on the same rank (the V's turn) takes no transfer, as none at the ends.
      const int stage = virtual_stage(s.placement, p, r, c);
      const bool first = stage == 0 || stage_location(s.placement, p, stage - 1).rank == r;
      const bool last = stage == p * v - 1 || stage_location(s.placement, p, stage + 1).rank == r;
      for (int j = 0; j < m; ++j) {
        const size_t key = static_cast<size_t>(c * m + j);
        const bool split = count[kWeight][key] > 0 || (count[kBackward][key] > 0 && count[kFused][key] == 0);
        const int expected[kWhats] = {1,
                                      with_backward,
                                      !first,
                                      !last,
                                      with_backward && !last,
                                      with_backward && !first,
                                      with_backward && split,
                                      with_backward && !split};
        for (int w = 0; w < kWhats; ++w) {
          if (count[static_cast<size_t>(w)][key] != expected[w]) {
            return absl::InvalidArgumentError(absl::StrCat(
                "schedule check: rank ", r, " has ", count[static_cast<size_t>(w)][key], " ", kNames[w],
                "(s) of chunk ", c, " microbatch ", j, ", expected ", expected[w]));
          }
        }
        auto before = [&](What a, What b) -> absl::Status {
          if (!expected[a] || !expected[b] || at[a][key] < at[b][key]) return absl::OkStatus();
          return absl::InvalidArgumentError(absl::StrCat("schedule check: rank ", r, " runs the ", kNames[a],
                                                         " of chunk ", c, " microbatch ", j, " (step ", at[a][key],
                                                         ") after its ", kNames[b], " (step ", at[b][key], ")"));
        };
        for (const auto& [a, b] : {std::pair{kForward, kBackward}, std::pair{kReceiveActivation, kForward},
                                   std::pair{kForward, kSendActivation}, std::pair{kReceiveGradient, kBackward},
                                   std::pair{kBackward, kSendGradient}, std::pair{kBackward, kWeight}}) {
          if (absl::Status status = before(a, b); !status.ok()) return status;
        }
      }
    }
  }
  return absl::OkStatus();
}

absl::Status check_timeline(const Schedule& s, const SimulationReport& report) {
  const int p = s.pipeline_size, stages = p * s.virtual_size, m = s.microbatches;
  // [stage * m + microbatch]
  std::vector<const ComputeInterval*> forward(static_cast<size_t>(stages * m), nullptr), backward(forward),
      weight(forward);
  if (report.ranks.size() != s.ranks.size()) return absl::InvalidArgumentError("report and schedule differ in ranks");
  for (int r = 0; r < p; ++r) {
    for (const ComputeInterval& interval : report.ranks[static_cast<size_t>(r)].compute) {
      const Instruction& i = interval.instruction;
      const size_t key = static_cast<size_t>(virtual_stage(s.placement, p, r, i.chunk) * m + i.microbatch);
      (i.op == Op::kForward ? forward : i.op == Op::kBackwardWeight ? weight : backward)[key] = &interval;
    }
  }
  const bool with_backward = training(s);
  auto order = [&](const ComputeInterval* before, const ComputeInterval* after, int stage, int j,
                   const char* what) -> absl::Status {
    if (before == nullptr || after == nullptr) {
      return absl::InvalidArgumentError(absl::StrCat("timeline check: ", what, " of virtual stage ", stage,
                                                     " microbatch ", j, " is missing from the timeline"));
    }
    if (after->start >= before->end) return absl::OkStatus();
    return absl::InvalidArgumentError(absl::StrCat("timeline check: ", what, " of virtual stage ", stage, " microbatch ",
                                                   j, " starts at ", after->start, " before ",
                                                   to_string(before->instruction), " ends at ", before->end));
  };
  for (int k = 0; k < stages; ++k) {
    for (int j = 0; j < m; ++j) {
      const size_t key = static_cast<size_t>(k * m + j);
      if (k > 0) {
        if (absl::Status status = order(forward[key - static_cast<size_t>(m)], forward[key], k, j, "forward"); !status.ok()) {
          return status;
        }
      }
      if (!with_backward) continue;
      const ComputeInterval* upstream = k + 1 < stages ? backward[key + static_cast<size_t>(m)] : forward[key];
      if (absl::Status status = order(upstream, backward[key], k, j, "backward"); !status.ok()) return status;
      if (weight[key] != nullptr) {
        if (absl::Status status = order(backward[key], weight[key], k, j, "W"); !status.ok()) return status;
      }
    }
  }
  return absl::OkStatus();
}

absl::Status verify_schedule(const Schedule& schedule) {
  if (absl::Status status = check_schedule(schedule); !status.ok()) return status;
  absl::StatusOr<SimulationReport> report =
      simulate(schedule, Costs::uniform(schedule.pipeline_size, schedule.virtual_size, 1.0, 2.0));
  if (!report.ok()) return report.status();
  return check_timeline(schedule, *report);
}

}  // namespace gpt::pipeline
