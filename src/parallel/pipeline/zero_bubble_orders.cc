#include "parallel/pipeline/zero_bubble_orders.h"

#include <deque>
#include <optional>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpt::pipeline {

// ZB-H1 for one rank (Qi et al., "Zero Bubble Pipeline Parallelism", ICLR 2024, their handcrafted
// schedule): 1F1B's p - r - 1 warm-up forwards; then r iterations of F and B whose W waits; then
// the steady F, B, W of the oldest waiting microbatch; the cool-down's B and W; last, the r W
// passes still waiting, which fill the cool-down bubble. Every rank holds at most p microbatches
// between F and W (1F1B's most, that of its first rank). The first virtual stage sends no gradient,
// so its B and W run fused (kBackward), as Megatron's backward, and need no lease.
std::vector<Instruction> zero_bubble_h1_order(int p, int m, int rank) {
  std::vector<Instruction> order;
  int forward = 0, backward = 0, weight = 0;
  const bool fused = rank == 0;
  auto f = [&] { order.push_back({Op::kForward, 0, forward++, -1}); };
  auto b = [&] { order.push_back({fused ? Op::kBackward : Op::kBackwardInput, 0, backward++, -1}); };
  auto w = [&] {
    if (!fused) order.push_back({Op::kBackwardWeight, 0, weight, -1});
    ++weight;
  };
  for (int k = 0; k < p - rank - 1 && forward < m; ++k) f();
  for (int k = 0; k < rank && forward < m; ++k) {
    f();
    b();
  }
  while (forward < m) {
    f();
    b();
    w();
  }
  while (backward < m) {
    b();
    w();
  }
  while (weight < m) w();
  return order;
}

// ZB-V's compute orders (Placement::kV, v = 2: rank r holds stages r and 2p - 1 - r), as a list
// schedule in unit time (F = B = W = 1 per chunk): each rank, when free, runs the first ready pass
// of: a forward (its later stage first), a backward (B, later stage first), the oldest waiting W.
// A forward waits while the rank holds 2p (chunk, microbatch) pairs between F and W: p
// microbatches' activations, 1F1B's most. The first stage's backward (it sends no gradient) and
// the last one's run B and W as one fused backward where the W would follow at once.
absl::StatusOr<std::vector<std::vector<Instruction>>> zero_bubble_v_orders(int p, int m) {
  const int stages = 2 * p, limit = 2 * p;
  auto at = [m](int stage, int microbatch) { return static_cast<size_t>(stage * m + microbatch); };
  std::vector<int> forward_end(static_cast<size_t>(stages * m), -1), backward_end(forward_end);
  std::vector<int> next_forward(static_cast<size_t>(stages), 0), next_backward(next_forward);
  std::vector<int> live(static_cast<size_t>(p), 0), free_at(static_cast<size_t>(p), 0);
  std::vector<std::deque<std::pair<int, int>>> waiting(static_cast<size_t>(p));  // (chunk, microbatch)
  std::vector<std::vector<Instruction>> orders(static_cast<size_t>(p));
  const int passes = 3 * stages * m;
  auto done = [](int end, int t) { return end >= 0 && end <= t; };
  int scheduled = 0;
  for (int t = 0; scheduled < passes; ++t) {
    if (t > 4 * passes) {
      return absl::InternalError(absl::StrCat("the ZB-V list schedule stalls for p = ", p, ", m = ", m));
    }
    for (int r = 0; r < p; ++r) {
      const size_t rr = static_cast<size_t>(r);
      if (free_at[rr] > t) continue;
      std::optional<Instruction> pick;
      for (int chunk : {1, 0}) {  // forwards, the later stage first
        const int stage = virtual_stage(Placement::kV, p, r, chunk);
        const int j = next_forward[static_cast<size_t>(stage)];
        if (pick || j >= m || live[rr] >= limit) continue;
        if (stage == 0 || done(forward_end[at(stage - 1, j)], t)) pick = Instruction{Op::kForward, chunk, j, -1};
      }
      for (int chunk : {1, 0}) {  // then backwards (B)
        const int stage = virtual_stage(Placement::kV, p, r, chunk);
        const int j = next_backward[static_cast<size_t>(stage)];
        if (pick || j >= m || !done(forward_end[at(stage, j)], t)) continue;
        if (stage == stages - 1 || done(backward_end[at(stage + 1, j)], t)) {
          pick = Instruction{Op::kBackwardInput, chunk, j, -1};
        }
      }
      if (!pick && !waiting[rr].empty()) {
        pick = Instruction{Op::kBackwardWeight, waiting[rr].front().first, waiting[rr].front().second, -1};
      }
      if (!pick) continue;
      const int stage = virtual_stage(Placement::kV, p, r, pick->chunk);
      switch (pick->op) {
        case Op::kForward:
          forward_end[at(stage, pick->microbatch)] = t + 1;
          ++next_forward[static_cast<size_t>(stage)];
          ++live[rr];
          break;
        case Op::kBackwardInput:
          backward_end[at(stage, pick->microbatch)] = t + 1;
          ++next_backward[static_cast<size_t>(stage)];
          waiting[rr].push_back({pick->chunk, pick->microbatch});
          break;
        default:
          waiting[rr].pop_front();
          --live[rr];
          break;
      }
      orders[rr].push_back(*pick);
      free_at[rr] = t + 1;
      ++scheduled;
    }
  }
  // Fuse a B and its W where the W follows at once on the first stage (which sends no gradient).
  for (std::vector<Instruction>& order : orders) {
    std::vector<Instruction> fused;
    for (const Instruction& i : order) {
      if (i.op == Op::kBackwardWeight && !fused.empty() && fused.back().op == Op::kBackwardInput &&
          fused.back().chunk == i.chunk && fused.back().microbatch == i.microbatch &&
          virtual_stage(Placement::kV, p, static_cast<int>(&order - orders.data()), i.chunk) == 0) {
        fused.back().op = Op::kBackward;
        continue;
      }
      fused.push_back(i);
    }
    order = std::move(fused);
  }
  return orders;
}

}  // namespace gpt::pipeline
