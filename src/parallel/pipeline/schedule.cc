#include "parallel/pipeline/schedule.h"

#include <algorithm>
#include <deque>
#include <initializer_list>
#include <limits>
#include <optional>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_join.h"
#include "core/check.h"
#include "parallel/pipeline/zero_bubble_orders.h"

namespace gpt::pipeline {
namespace {

// Appends one rank's steps. Transfers this stage does not make (the first virtual stage's
// activation receive, ...) are passed as nullopt and dropped, the way Megatron's p2p helpers skip
// a None tensor; a batch left empty posts nothing.
class RankWriter {
 public:
  RankWriter(int pipeline_size, int virtual_size, int rank, Placement placement = Placement::kLoop)
      : p_(pipeline_size), v_(virtual_size), rank_(rank), placement_(placement) {}

  void compute(Op op, int chunk, int microbatch) { steps_.push_back(Step{{Instruction{op, chunk, microbatch, -1}}}); }

  void transfers(std::initializer_list<std::optional<Instruction>> batch) {
    transfers(std::vector<std::optional<Instruction>>(batch));
  }
  void transfers(const std::vector<std::optional<Instruction>>& batch) {
    Step step;
    for (const std::optional<Instruction>& transfer : batch) {
      if (transfer) step.instructions.push_back(*transfer);
    }
    if (step.instructions.empty()) return;
    // Posting order (schedule.h): activations first, then microbatch, then the sending stage.
    auto key = [&](const Instruction& i) {
      int sender = stage(i.chunk);
      if (i.op == Op::kReceiveActivation) sender -= 1;
      if (i.op == Op::kReceiveGradient) sender += 1;
      return std::make_tuple(is_gradient_op(i.op), i.microbatch, sender);
    };
    std::stable_sort(step.instructions.begin(), step.instructions.end(),
                     [&](const Instruction& a, const Instruction& b) { return key(a) < key(b); });
    steps_.push_back(std::move(step));
  }

  // A neighbouring stage on this rank (kV's turn) takes no transfer, like a missing one.
  std::optional<Instruction> send_activation(int chunk, int microbatch) const {
    const std::optional<int> peer = neighbour(chunk, +1);
    if (!peer) return std::nullopt;
    return Instruction{Op::kSendActivation, chunk, microbatch, *peer};
  }
  std::optional<Instruction> receive_activation(int chunk, int microbatch) const {
    const std::optional<int> peer = neighbour(chunk, -1);
    if (!peer) return std::nullopt;
    return Instruction{Op::kReceiveActivation, chunk, microbatch, *peer};
  }
  std::optional<Instruction> send_gradient(int chunk, int microbatch) const {
    const std::optional<int> peer = neighbour(chunk, -1);
    if (!peer) return std::nullopt;
    return Instruction{Op::kSendGradient, chunk, microbatch, *peer};
  }
  std::optional<Instruction> receive_gradient(int chunk, int microbatch) const {
    const std::optional<int> peer = neighbour(chunk, +1);
    if (!peer) return std::nullopt;
    return Instruction{Op::kReceiveGradient, chunk, microbatch, *peer};
  }

  std::vector<Step> take() { return std::move(steps_); }

 private:
  int stage(int chunk) const { return virtual_stage(placement_, p_, rank_, chunk); }
  // The rank of the stage next to this chunk's (+1 downstream, -1 upstream); none at either end or
  // on this rank.
  std::optional<int> neighbour(int chunk, int direction) const {
    const int other = stage(chunk) + direction;
    if (other < 0 || other >= p_ * v_) return std::nullopt;
    const int rank = stage_location(placement_, p_, other).rank;
    if (rank == rank_) return std::nullopt;
    return rank;
  }

  int p_, v_, rank_;
  Placement placement_;
  std::vector<Step> steps_;
};

// Megatron's forward_backward_pipelining_without_interleaving for one rank, with `warmup` forwards
// before the steady 1F1B phase (p - r - 1 for 1F1B; m gives all-forward-all-backward). Forwards
// and backwards run in microbatch order. Warm-up and cool-down transfers are single blocking
// sends and receives; the steady phase pairs them the way Megatron batches
// send_forward_recv_backward and send_backward_recv_forward, so that rank r's
// {send activation j to r+1, receive gradient i from r+1} meets r+1's mirror step.
std::vector<Step> without_interleaving(int p, int m, int rank, int warmup, bool forward_only) {
  RankWriter out(p, 1, rank);
  const int remaining = m - warmup;
  for (int i = 0; i < warmup; ++i) {
    out.transfers({out.receive_activation(0, i)});
    out.compute(Op::kForward, 0, i);
    out.transfers({out.send_activation(0, i)});
  }
  if (remaining > 0) out.transfers({out.receive_activation(0, warmup)});
  for (int i = 0; i < remaining; ++i) {
    const int forward = warmup + i;
    const bool last_iteration = i == remaining - 1;
    out.compute(Op::kForward, 0, forward);
    if (forward_only) {
      out.transfers({out.send_activation(0, forward)});
      if (!last_iteration) out.transfers({out.receive_activation(0, forward + 1)});
      continue;
    }
    out.transfers({out.send_activation(0, forward), out.receive_gradient(0, i)});
    out.compute(Op::kBackward, 0, i);
    if (last_iteration) {
      out.transfers({out.send_gradient(0, i)});
    } else {
      out.transfers({out.send_gradient(0, i), out.receive_activation(0, forward + 1)});
    }
  }
  if (!forward_only) {
    for (int i = std::max(remaining, 0); i < m; ++i) {
      out.transfers({out.receive_gradient(0, i)});
      out.compute(Op::kBackward, 0, i);
      out.transfers({out.send_gradient(0, i)});
    }
  }
  return out.take();
}

// Megatron's get_schedule_table: the (microbatch, chunk) of each of a rank's m * v "virtual
// microbatches". Microbatches go in groups of n (the last group takes what is left, m % n or n),
// and within a group every chunk runs the group's microbatches before the next chunk starts; with
// n = p and m a multiple of p, entry k is chunk (k / p) % v of microbatch (k / (p v)) * p + k % p.
struct TableEntry {
  int microbatch, chunk;
};
std::vector<TableEntry> schedule_table(int v, int m, int n) {
  std::vector<TableEntry> table;
  table.reserve(static_cast<size_t>(m) * static_cast<size_t>(v));
  for (int first = 0; first < m; first += n) {
    const int end = std::min(first + n, m);
    for (int chunk = 0; chunk < v; ++chunk) {
      for (int microbatch = first; microbatch < end; ++microbatch) table.push_back({microbatch, chunk});
    }
  }
  return table;
}

// Megatron's forward_backward_pipelining_with_interleaving (without p2p overlap) for one rank.
// The k-th forward runs schedule_table entry k (microbatch group n); the k-th backward runs the
// same entry with the chunks reversed. Rank r warms up with (p - r - 1) * 2 + (v - 1) * n forwards.
// After each iteration (a forward, a forward and a backward, or a backward) one batch sends what
// the iteration produced and receives the inputs of the next iteration (Megatron's
// send_forward_backward_recv_forward_backward and its halves). `all_warmup` runs every forward
// before any backward (all-forward-all-backward).
std::vector<Step> with_interleaving(int p, int v, int m, int n, int rank, bool all_warmup, bool forward_only) {
  RankWriter out(p, v, rank);
  const int total = m * v;
  const std::vector<TableEntry> table = schedule_table(v, m, n);
  auto forward_chunk = [&](int k) { return table[static_cast<size_t>(k % total)].chunk; };
  auto backward_chunk = [&](int k) { return v - 1 - forward_chunk(k); };
  auto microbatch_of = [&](int k) { return table[static_cast<size_t>(k % total)].microbatch; };
  int warmup = forward_only || all_warmup ? total : std::min((p - rank - 1) * 2 + (v - 1) * n, total);
  const bool every_forward_in_warmup = warmup == total;
  const int remaining = total - warmup;

  // Each chunk runs its microbatches in order, forwards and backwards alike, so the n-th tensor a
  // chunk receives belongs to microbatch n.
  std::vector<int> activations_received(static_cast<size_t>(v), 0), gradients_received(static_cast<size_t>(v), 0);
  auto receive_activation = [&](int chunk) {
    std::optional<Instruction> i = out.receive_activation(chunk, activations_received[static_cast<size_t>(chunk)]);
    if (i) ++activations_received[static_cast<size_t>(chunk)];
    return i;
  };
  auto receive_gradient = [&](int chunk) {
    std::optional<Instruction> i = out.receive_gradient(chunk, gradients_received[static_cast<size_t>(chunk)]);
    if (i) ++gradients_received[static_cast<size_t>(chunk)];
    return i;
  };

  // Megatron's recv_tensor_from_previous_stage: whether the batch after iteration k receives the
  // input of the next iteration, and for which chunk. The leading rank (rank 0 for forwards, rank
  // p - 1 for backwards) takes its later chunks' inputs from the other end of the ring, which runs
  // p - 1 iterations behind it; the last chunk of that end produces nothing to receive.
  auto receive_for_next = [&](int k, bool forward) -> std::optional<int> {
    const bool leading = forward ? rank == 0 : rank == p - 1;
    auto chunk_of = [&](int i) { return forward ? forward_chunk(i) : backward_chunk(i); };
    if (!leading) return chunk_of(k + 1);
    if (k < p - 1) return std::nullopt;  // the other end has produced nothing yet
    const int producer_chunk = chunk_of(k - (p - 1));
    if (producer_chunk == (forward ? v - 1 : 0)) return std::nullopt;
    return forward ? producer_chunk + 1 : producer_chunk - 1;
  };
  auto maybe = [](std::optional<int> chunk, auto receive) -> std::optional<Instruction> {
    return chunk ? receive(*chunk) : std::nullopt;
  };

  out.transfers({receive_activation(0)});
  for (int k = 0; k < warmup; ++k) {
    const int chunk = forward_chunk(k), microbatch = microbatch_of(k);
    out.compute(Op::kForward, chunk, microbatch);
    std::optional<int> next_chunk = receive_for_next(k, true);
    if (k == total - 1) next_chunk.reset();
    if (k == warmup - 1 && !every_forward_in_warmup) {
      // The last warm-up batch also receives the first backward's gradient (for the last chunk).
      out.transfers({out.send_activation(chunk, microbatch), maybe(next_chunk, receive_activation),
                     receive_gradient(v - 1)});
    } else {
      out.transfers({out.send_activation(chunk, microbatch), maybe(next_chunk, receive_activation)});
    }
  }
  for (int k = 0; k < remaining; ++k) {
    const int forward = warmup + k, backward = k;
    const int f_chunk = forward_chunk(forward), b_chunk = backward_chunk(backward);
    out.compute(Op::kForward, f_chunk, microbatch_of(forward));
    out.compute(Op::kBackward, b_chunk, microbatch_of(backward));
    std::optional<int> next_forward_chunk = receive_for_next(forward, true);
    if (k == remaining - 1) next_forward_chunk.reset();
    const std::optional<int> next_backward_chunk = receive_for_next(backward, false);
    out.transfers({out.send_activation(f_chunk, microbatch_of(forward)), maybe(next_forward_chunk, receive_activation),
                   out.send_gradient(b_chunk, microbatch_of(backward)), maybe(next_backward_chunk, receive_gradient)});
  }
  if (forward_only) return out.take();
  if (every_forward_in_warmup) out.transfers({receive_gradient(v - 1)});
  for (int k = remaining; k < total; ++k) {
    const int chunk = backward_chunk(k), microbatch = microbatch_of(k);
    out.compute(Op::kBackward, chunk, microbatch);
    std::optional<int> next_chunk = receive_for_next(k, false);
    if (k == total - 1) next_chunk.reset();
    out.transfers({out.send_gradient(chunk, microbatch), maybe(next_chunk, receive_gradient)});
  }
  return out.take();
}


constexpr const char* kInterleavingNeedsPipeline =
    "--num-layers-per-virtual-pipeline-stage (an interleaved schedule) needs --pipeline-model-parallel-size > 1";

absl::Status check_sizes(int p, int v, int m, int n = 0);

// check_sizes without the interleaved schedule's rule on m.
absl::Status check_counts(int p, int v, int m) {
  if (p < 1) return absl::InvalidArgumentError(absl::StrCat("--pipeline-model-parallel-size must be at least 1, got ", p));
  if (v < 1) return absl::InvalidArgumentError(absl::StrCat("virtual pipeline size must be at least 1, got ", v));
  if (m < 1) return absl::InvalidArgumentError(absl::StrCat("the number of microbatches must be at least 1, got ", m));
  if (v > 1 && p == 1) return absl::InvalidArgumentError(kInterleavingNeedsPipeline);
  return absl::OkStatus();
}

// n: the interleaved schedule's microbatch group size, 0 for Megatron's default (p).
absl::Status check_sizes(int p, int v, int m, int n) {
  if (p < 1) return absl::InvalidArgumentError(absl::StrCat("--pipeline-model-parallel-size must be at least 1, got ", p));
  if (v < 1) return absl::InvalidArgumentError(absl::StrCat("virtual pipeline size must be at least 1, got ", v));
  if (m < 1) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the number of microbatches (--global-batch-size / (--micro-batch-size x data-parallel size)) must be at least "
        "1, got ",
        m));
  }
  if (v > 1 && p == 1) return absl::InvalidArgumentError(kInterleavingNeedsPipeline);
  if (v > 1 && n != 0) {
    // Megatron's checks in forward_backward_pipelining_with_interleaving.
    if (n < p || n > m) {
      return absl::InvalidArgumentError(absl::StrCat(
          "--microbatch-group-size-per-virtual-pipeline-stage (", n,
          ", the number of contiguous microbatches in a virtual pipeline stage) must range in "
          "[--pipeline-model-parallel-size (", p, "), the number of microbatches (", m,
          " = --global-batch-size / (--micro-batch-size x data-parallel size))]"));
    }
    if (m % n != 0 && m % n < p) {
      return absl::InvalidArgumentError(absl::StrCat(
          "the remainder of the number of microbatches (", m, ") divided by "
          "--microbatch-group-size-per-virtual-pipeline-stage (", n, ") must be 0 or at least "
          "--pipeline-model-parallel-size (", p, "), but it is ", m % n,
          ": a last group smaller than the pipeline leaves dependency bubbles (Megatron's rule)"));
    }
    return absl::OkStatus();
  }
  if (v > 1 && m % p != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "the interleaved schedule (--num-layers-per-virtual-pipeline-stage) needs the number of microbatches (", m,
        " = --global-batch-size / (--micro-batch-size x data-parallel size)) to be a multiple of "
        "--pipeline-model-parallel-size (",
        p, ")"));
  }
  return absl::OkStatus();
}

// The layer checks of validate_pipeline_layout; returns v.
absl::StatusOr<int> layout_virtual_size(int num_layers, int p, int layers_per_virtual_stage) {
  if (num_layers < 1) return absl::InvalidArgumentError(absl::StrCat("--num-layers must be at least 1, got ", num_layers));
  if (p < 1) return absl::InvalidArgumentError(absl::StrCat("--pipeline-model-parallel-size must be at least 1, got ", p));
  if (layers_per_virtual_stage < 0) {
    return absl::InvalidArgumentError(
        absl::StrCat("--num-layers-per-virtual-pipeline-stage must be positive, got ", layers_per_virtual_stage));
  }
  if (p > num_layers) {
    return absl::InvalidArgumentError(absl::StrCat("--pipeline-model-parallel-size (", p, ") exceeds --num-layers (",
                                                   num_layers, "): every pipeline stage needs at least one layer"));
  }
  if (num_layers % p != 0) {
    return absl::InvalidArgumentError(absl::StrCat("--num-layers (", num_layers,
                                                   ") must be divisible by --pipeline-model-parallel-size (", p, ")"));
  }
  if (layers_per_virtual_stage == 0) return 1;
  if ((num_layers / p) % layers_per_virtual_stage != 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--num-layers (", num_layers, ") must be divisible by --pipeline-model-parallel-size (", p,
        ") x --num-layers-per-virtual-pipeline-stage (", layers_per_virtual_stage, ")"));
  }
  const int v = num_layers / (p * layers_per_virtual_stage);
  if (v > 1 && p == 1) return absl::InvalidArgumentError(kInterleavingNeedsPipeline);
  return v;
}

}  // namespace

absl::StatusOr<ScheduleKind> parse_schedule_kind(std::string_view name) {
  if (name == "afab") return ScheduleKind::kAllForwardAllBackward;
  if (name == "1f1b") return ScheduleKind::kOneFOneB;
  if (name == "interleaved") return ScheduleKind::kInterleaved;
  if (name == "zb-h1") return ScheduleKind::kZeroBubbleH1;
  if (name == "zb-v") return ScheduleKind::kZeroBubbleV;
  return absl::InvalidArgumentError(
      absl::StrCat("unknown pipeline schedule '", std::string(name), "' (afab, 1f1b, interleaved, zb-h1, zb-v)"));
}

const char* to_string(ScheduleKind kind) {
  switch (kind) {
    case ScheduleKind::kAllForwardAllBackward: return "afab";
    case ScheduleKind::kOneFOneB: return "1f1b";
    case ScheduleKind::kInterleaved: return "interleaved";
    case ScheduleKind::kZeroBubbleH1: return "zb-h1";
    case ScheduleKind::kZeroBubbleV: return "zb-v";
  }
  return "?";
}

ScheduleKind default_schedule_kind(int virtual_size) {
  return virtual_size > 1 ? ScheduleKind::kInterleaved : ScheduleKind::kOneFOneB;
}

absl::Status validate_pipeline_layout(int num_layers, int p, int layers_per_virtual_stage, int microbatches,
                                      int microbatch_group) {
  absl::StatusOr<int> v = layout_virtual_size(num_layers, p, layers_per_virtual_stage);
  return v.ok() ? check_sizes(p, *v, microbatches, microbatch_group) : v.status();
}

absl::StatusOr<int> virtual_pipeline_size(int num_layers, int p, int layers_per_virtual_stage) {
  return layout_virtual_size(num_layers, p, layers_per_virtual_stage);
}

absl::StatusOr<Schedule> make_schedule(ScheduleKind kind, int p, int v, int m, int microbatch_group) {
  if (kind == ScheduleKind::kZeroBubbleV) {
    if (v != 2 || p < 2) {
      return absl::InvalidArgumentError(
          "the zb-v schedule runs two model chunks per rank placed in a V: it needs "
          "--pipeline-model-parallel-size > 1 and --num-layers-per-virtual-pipeline-stage giving 2 chunks per rank");
    }
    if (absl::Status status = check_counts(p, v, m); !status.ok()) return status;
    absl::StatusOr<std::vector<std::vector<Instruction>>> orders = zero_bubble_v_orders(p, m);
    if (!orders.ok()) return orders.status();
    return lower_compute_orders(p, v, m, *orders, {}, Placement::kV);
  }
  if (microbatch_group < 0) {
    return absl::InvalidArgumentError(absl::StrCat(
        "--microbatch-group-size-per-virtual-pipeline-stage must be positive, got ", microbatch_group));
  }
  if (absl::Status status = check_sizes(p, v, m, microbatch_group); !status.ok()) return status;
  const int n = microbatch_group == 0 ? p : microbatch_group;
  if (kind == ScheduleKind::kOneFOneB && v > 1) {
    return absl::InvalidArgumentError(
        "the 1f1b schedule runs one model chunk per rank; with --num-layers-per-virtual-pipeline-stage use the "
        "interleaved schedule");
  }
  if (kind == ScheduleKind::kInterleaved && v == 1) {
    return absl::InvalidArgumentError(
        "the interleaved schedule needs --num-layers-per-virtual-pipeline-stage giving more than one model chunk per "
        "rank");
  }
  if (kind == ScheduleKind::kZeroBubbleH1) {
    if (v > 1) {
      return absl::InvalidArgumentError(
          "the zb-h1 schedule (--pipeline-schedule) runs one model chunk per rank; drop "
          "--num-layers-per-virtual-pipeline-stage or use --pipeline-schedule interleaved");
    }
    std::vector<std::vector<Instruction>> orders;
    for (int rank = 0; rank < p; ++rank) orders.push_back(zero_bubble_h1_order(p, m, rank));
    return lower_compute_orders(p, v, m, orders);
  }
  Schedule schedule{p, v, m, {}};
  for (int rank = 0; rank < p; ++rank) {
    if (v == 1) {
      const int warmup = kind == ScheduleKind::kAllForwardAllBackward ? m : std::min(p - rank - 1, m);
      schedule.ranks.push_back(without_interleaving(p, m, rank, warmup, /*forward_only=*/false));
    } else {
      schedule.ranks.push_back(with_interleaving(p, v, m, n, rank, kind == ScheduleKind::kAllForwardAllBackward,
                                                 /*forward_only=*/false));
    }
  }
  return schedule;
}

absl::StatusOr<Schedule> lower_compute_orders(int p, int v, int m, const std::vector<std::vector<Instruction>>& orders,
                                              const ComputeCosts& costs, Placement placement) {
  if (absl::Status status = check_counts(p, v, m); !status.ok()) return status;
  if (placement == Placement::kV && v != 2) {
    return absl::InvalidArgumentError(absl::StrCat("the V placement needs 2 model chunks per rank, got ", v));
  }
  if (static_cast<int>(orders.size()) != p) {
    return absl::InvalidArgumentError(absl::StrCat(orders.size(), " compute orders for ", p, " pipeline ranks"));
  }
  const int stages = p * v;
  // [op][stage * m + microbatch]: the end of each pass in the ideal timeline (-1: not yet run).
  enum Pass { kF, kB, kW, kPasses };
  auto pass_of = [](Op op) { return op == Op::kForward ? kF : is_backward_op(op) ? kB : kW; };
  std::vector<std::vector<double>> start(kPasses, std::vector<double>(static_cast<size_t>(stages * m), -1)),
      end(start);
  std::vector<size_t> position(static_cast<size_t>(p), 0);
  std::vector<double> clock(static_cast<size_t>(p), 0);
  for (int r = 0; r < p; ++r) {
    for (const Instruction& i : orders[static_cast<size_t>(r)]) {
      if (!is_compute_op(i.op) || i.chunk < 0 || i.chunk >= v || i.microbatch < 0 || i.microbatch >= m) {
        return absl::InvalidArgumentError(absl::StrCat("compute order of rank ", r, ": invalid ", to_string(i)));
      }
    }
  }
  auto key = [&](int rank, int chunk, int microbatch) {
    return static_cast<size_t>(virtual_stage(placement, p, rank, chunk) * m + microbatch);
  };
  for (bool progress = true; progress;) {
    progress = false;
    for (int r = 0; r < p; ++r) {
      const std::vector<Instruction>& order = orders[static_cast<size_t>(r)];
      size_t& next = position[static_cast<size_t>(r)];
      while (next < order.size()) {
        const Instruction& i = order[next];
        const int stage = virtual_stage(placement, p, r, i.chunk);
        const size_t k = key(r, i.chunk, i.microbatch);
        const Pass pass = pass_of(i.op);
        double ready = 0;
        const double* dependency = nullptr;
        if (pass == kF && stage > 0) dependency = &end[kF][k - static_cast<size_t>(m)];
        if (pass == kB) dependency = stage + 1 < stages ? &end[kB][k + static_cast<size_t>(m)] : &end[kF][k];
        if (pass == kW) dependency = &end[kB][k];
        if (dependency != nullptr) {
          if (*dependency < 0) break;  // its producer has not run yet
          ready = *dependency;
        }
        if (end[pass][k] >= 0) {
          return absl::InvalidArgumentError(absl::StrCat("compute order of rank ", r, " repeats ", to_string(i)));
        }
        double cost = pass == kF ? costs.forward : pass == kW ? costs.weight : costs.backward_input;
        if (i.op == Op::kBackward) cost += costs.weight;
        double& now = clock[static_cast<size_t>(r)];
        start[pass][k] = std::max(now, ready);
        end[pass][k] = start[pass][k] + cost;
        if (i.op == Op::kBackward) start[kW][k] = end[kW][k] = end[kB][k];
        now = end[pass][k];
        ++next;
        progress = true;
      }
    }
  }
  for (int r = 0; r < p; ++r) {
    const std::vector<Instruction>& order = orders[static_cast<size_t>(r)];
    if (position[static_cast<size_t>(r)] < order.size()) {
      return absl::InvalidArgumentError(absl::StrCat("compute orders cannot run: rank ", r, " waits forever at ",
                                                     to_string(order[position[static_cast<size_t>(r)]])));
    }
  }
  // Orders of forwards alone (evaluation) lower to a forward-only schedule.
  bool forward_only = true;
  for (const std::vector<Instruction>& order : orders) {
    for (const Instruction& i : order) forward_only = forward_only && i.op == Op::kForward;
  }
  for (int pass = 0; pass < (forward_only ? 1 : kPasses); ++pass) {
    for (size_t k = 0; k < end[static_cast<size_t>(pass)].size(); ++k) {
      if (end[static_cast<size_t>(pass)][k] >= 0) continue;
      const int stage = static_cast<int>(k) / m;
      return absl::InvalidArgumentError(absl::StrCat("compute orders miss the ", pass == kF ? "F" : pass == kB ? "B" : "W",
                                                     " of virtual stage ", stage, " microbatch ",
                                                     static_cast<int>(k) % m));
    }
  }

  // A transfer's key is the time its consumer starts, both ends alike. A chunk's input gradient is
  // valid until the chunk's next backward pass (stage.h), so a gradient's key is at the latest the
  // start of its producer's next B or W of that chunk. [stage * m + microbatch]: the gradient the
  // stage sends.
  std::vector<double> gradient_key(static_cast<size_t>(stages * m), 0);
  for (int r = 0; r < p; ++r) {
    const std::vector<Instruction>& order = orders[static_cast<size_t>(r)];
    for (size_t n = 0; n < order.size(); ++n) {
      const Instruction& i = order[n];
      const int stage = virtual_stage(placement, p, r, i.chunk);
      if (!is_backward_op(i.op) || stage == 0) continue;
      const size_t k = key(r, i.chunk, i.microbatch);
      double by = start[kB][k - static_cast<size_t>(m)];
      for (size_t later = n + 1; later < order.size(); ++later) {
        const Instruction& next = order[later];
        if (next.chunk != i.chunk || next.op == Op::kForward) continue;
        by = std::min(by, start[pass_of(next.op)][key(r, next.chunk, next.microbatch)]);
        break;
      }
      gradient_key[k] = by;
    }
  }

  Schedule schedule{p, v, m, {}, placement};
  for (int r = 0; r < p; ++r) {
    RankWriter out(p, v, r, placement);
    // This rank's transfers keyed by the time their consumer starts.
    std::vector<std::pair<double, Instruction>> transfers;
    const std::vector<Instruction>& order = orders[static_cast<size_t>(r)];
    for (const Instruction& i : order) {
      const size_t k = key(r, i.chunk, i.microbatch);
      const size_t mm = static_cast<size_t>(m);
      if (i.op == Op::kForward) {
        if (auto t = out.receive_activation(i.chunk, i.microbatch)) transfers.push_back({start[kF][k], *t});
        if (auto t = out.send_activation(i.chunk, i.microbatch)) transfers.push_back({start[kF][k + mm], *t});
      } else if (is_backward_op(i.op)) {
        if (auto t = out.receive_gradient(i.chunk, i.microbatch)) transfers.push_back({gradient_key[k + mm], *t});
        if (auto t = out.send_gradient(i.chunk, i.microbatch)) transfers.push_back({gradient_key[k], *t});
      }
    }
    std::stable_sort(transfers.begin(), transfers.end(),
                     [](const auto& a, const auto& b) { return a.first < b.first; });
    size_t next = 0;
    auto flush_until = [&](double time) {
      while (next < transfers.size() && transfers[next].first <= time) {
        const double batch = transfers[next].first;
        std::vector<std::optional<Instruction>> step;
        for (; next < transfers.size() && transfers[next].first == batch; ++next) step.push_back(transfers[next].second);
        out.transfers(step);
      }
    };
    for (const Instruction& i : order) {
      flush_until(start[pass_of(i.op)][key(r, i.chunk, i.microbatch)]);
      out.compute(i.op, i.chunk, i.microbatch);
    }
    flush_until(std::numeric_limits<double>::infinity());
    schedule.ranks.push_back(out.take());
  }
  return schedule;
}

absl::StatusOr<Schedule> make_forward_only_schedule(int p, int v, int m, Placement placement, int microbatch_group) {
  if (placement == Placement::kV) {
    // ZB-V's forwards in the training order: the same stash slots, and the turn's hand-off.
    if (v != 2 || p < 2) return make_schedule(ScheduleKind::kZeroBubbleV, p, v, m).status();
    if (absl::Status status = check_counts(p, v, m); !status.ok()) return status;
    absl::StatusOr<std::vector<std::vector<Instruction>>> orders = zero_bubble_v_orders(p, m);
    if (!orders.ok()) return orders.status();
    for (std::vector<Instruction>& order : *orders) {
      std::erase_if(order, [](const Instruction& i) { return i.op != Op::kForward; });
    }
    return lower_compute_orders(p, v, m, *orders, {}, Placement::kV);
  }
  if (microbatch_group < 0) return make_schedule(ScheduleKind::kInterleaved, p, v, m, microbatch_group).status();
  if (absl::Status status = check_sizes(p, v, m, microbatch_group); !status.ok()) return status;
  const int n = microbatch_group == 0 ? p : microbatch_group;
  Schedule schedule{p, v, m, {}};
  for (int rank = 0; rank < p; ++rank) {
    schedule.ranks.push_back(v == 1 ? without_interleaving(p, m, rank, m, /*forward_only=*/true)
                                    : with_interleaving(p, v, m, n, rank, true, /*forward_only=*/true));
  }
  return schedule;
}

double expected_bubble_fraction(ScheduleKind kind, int p, int v, int m) {
  if (kind == ScheduleKind::kZeroBubbleH1) return static_cast<double>(p - 1) / (3.0 * m);
  if (kind == ScheduleKind::kZeroBubbleV) return static_cast<double>(p - 1) / (6.0 * m);
  return static_cast<double>(p - 1) / (static_cast<double>(v) * m);
}

int expected_peak_live(ScheduleKind kind, int p, int v, int m, int rank, int microbatch_group) {
  const int n = microbatch_group == 0 ? p : microbatch_group;
  switch (kind) {
    case ScheduleKind::kAllForwardAllBackward: return m * v;
    case ScheduleKind::kOneFOneB: return std::min(p - rank, m);
    case ScheduleKind::kInterleaved: return std::min((p - rank - 1) * 2 + (v - 1) * n + 1, m * v);
    case ScheduleKind::kZeroBubbleH1: return std::min(p, m);
    case ScheduleKind::kZeroBubbleV: return std::min(2 * p, 2 * m);
  }
  return 0;
}

Placement schedule_placement(ScheduleKind kind) {
  return kind == ScheduleKind::kZeroBubbleV ? Placement::kV : Placement::kLoop;
}

int virtual_stage(Placement placement, int p, int rank, int chunk) {
  if (placement == Placement::kV) return chunk == 0 ? rank : 2 * p - 1 - rank;
  return virtual_stage(p, rank, chunk);
}

StageLocation stage_location(Placement placement, int p, int stage) {
  if (placement == Placement::kV) return stage < p ? StageLocation{stage, 0} : StageLocation{2 * p - 1 - stage, 1};
  return {stage % p, stage / p};
}

bool is_compute_op(Op op) {
  return op == Op::kForward || op == Op::kBackward || op == Op::kBackwardInput || op == Op::kBackwardWeight;
}
bool is_backward_op(Op op) { return op == Op::kBackward || op == Op::kBackwardInput; }
bool is_gradient_op(Op op) { return op == Op::kSendGradient || op == Op::kReceiveGradient; }
bool is_send_op(Op op) { return op == Op::kSendActivation || op == Op::kSendGradient; }

const char* to_string(Op op) {
  switch (op) {
    case Op::kForward: return "F";
    case Op::kBackward: return "B";
    case Op::kSendActivation: return "send-activation";
    case Op::kReceiveActivation: return "receive-activation";
    case Op::kSendGradient: return "send-gradient";
    case Op::kReceiveGradient: return "receive-gradient";
    case Op::kBackwardInput: return "Bi";
    case Op::kBackwardWeight: return "W";
  }
  return "?";
}

std::string to_string(const Instruction& i) {
  std::string text = absl::StrCat(to_string(i.op), " c", i.chunk, " mb", i.microbatch);
  if (!is_compute_op(i.op)) absl::StrAppend(&text, is_send_op(i.op) ? " -> rank " : " <- rank ", i.peer);
  return text;
}

std::string to_string(const Step& step) {
  return absl::StrJoin(step.instructions, " + ",
                       [](std::string* out, const Instruction& i) { absl::StrAppend(out, to_string(i)); });
}

}  // namespace gpt::pipeline
