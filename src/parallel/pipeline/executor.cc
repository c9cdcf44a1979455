#include "parallel/pipeline/executor.h"

#include <algorithm>
#include <set>
#include <tuple>

#include "core/check.h"
#include "core/phase_timer.h"
#include "core/timer.h"
#include "kernels/ops.h"

namespace gpt::pipeline {

std::vector<int> stash_slots(std::span<const Step> steps, int chunks, const RankStages& where) {
  std::vector<int> live(static_cast<size_t>(chunks), 0), peak(static_cast<size_t>(chunks), 1);
  std::set<std::pair<int, int>> backward, sent;
  for (const Step& step : steps) {
    for (const Instruction& i : step.instructions) {
      if (i.op == Op::kBackward || i.op == Op::kBackwardInput) backward.insert({i.chunk, i.microbatch});
      if (i.op == Op::kSendActivation) sent.insert({i.chunk, i.microbatch});
    }
  }
  // A microbatch holds its slot from its activation's arrival (or its forward) until its backward
  // (its W when split); without a backward (forward only), until its activation is sent, or
  // through its forward.
  std::set<std::pair<int, int>> holding;
  for (const Step& step : steps) {
    for (const Instruction& i : step.instructions) {
      GPT_CHECK(i.chunk >= 0 && i.chunk < chunks) << "schedule chunk " << i.chunk << " of " << chunks;
      const std::pair<int, int> key{i.chunk, i.microbatch};
      const size_t c = static_cast<size_t>(i.chunk);
      if ((i.op == Op::kReceiveActivation || i.op == Op::kForward) && holding.insert(key).second) {
        peak[c] = std::max(peak[c], ++live[c]);
      }
      if (i.op == Op::kForward && i.chunk == 0 && where.has_turn() && chunks == 2 &&
          holding.insert({1, i.microbatch}).second) {
        peak[1] = std::max(peak[1], ++live[1]);  // the turn's hand-off to chunk 1
      }
      const bool forward_only = backward.count(key) == 0;
      const bool done = i.op == Op::kBackward || i.op == Op::kBackwardWeight ||
                        (forward_only && (sent.count(key) ? i.op == Op::kSendActivation : i.op == Op::kForward));
      if (done && holding.erase(key) > 0) --live[c];
    }
  }
  return peak;
}

std::vector<int> deferral_depths(std::span<const Step> steps, int chunks) {
  std::vector<int> waiting(static_cast<size_t>(chunks), 0), depth(static_cast<size_t>(chunks), 0);
  for (const Step& step : steps) {
    for (const Instruction& i : step.instructions) {
      GPT_CHECK(i.chunk >= 0 && i.chunk < chunks) << "schedule chunk " << i.chunk << " of " << chunks;
      const size_t c = static_cast<size_t>(i.chunk);
      if (i.op == Op::kBackwardInput) depth[c] = std::max(depth[c], ++waiting[c]);
      if (i.op == Op::kBackwardWeight) --waiting[c];
    }
  }
  return depth;
}

Executor::Executor(const RankStages& where, std::vector<Stage*> chunks, std::vector<int> slots, Arena& arena)
    : where_(where),
      rank_(where.pipeline_rank),
      size_(where.pipeline_size),
      chunks_(std::move(chunks)),
      slots_(std::move(slots)) {
  GPT_CHECK(!chunks_.empty() && chunks_.size() == slots_.size()) << "pipeline executor chunks";
  GPT_CHECK(where_.placement != Placement::kV || chunks_.size() == 2) << "the V placement runs two chunks per rank";
  activations_.resize(chunks_.size());
  gradients_.resize(chunks_.size());
  free_slots_.resize(chunks_.size());
  for (size_t c = 0; c < chunks_.size(); ++c) {
    for (int s = slots_[c] - 1; s >= 0; --s) free_slots_[c].push_back(s);
    if (size_ == 1) continue;  // nothing crosses a stage boundary
    for (int s = 0; s < slots_[c]; ++s) {
      if (!first_virtual_stage(static_cast<int>(c))) {
        activations_[c].push_back(arena.allocate(chunks_[c]->boundary_dtype(), chunks_[c]->boundary_shape()));
      }
      if (!last_virtual_stage(static_cast<int>(c))) {
        gradients_[c].push_back(arena.allocate(chunks_[c]->boundary_dtype(), chunks_[c]->boundary_shape()));
      }
    }
  }
}

int64_t Executor::buffer_bytes(const RankStages& where, std::span<const int> slots, DType dtype,
                               const Shape& boundary) {
  if (where.pipeline_size == 1) return 0;
  const int chunks = static_cast<int>(slots.size());
  int64_t buffers = 0;
  for (int c = 0; c < chunks; ++c) {
    const bool first = where.stage(c) == 0;
    const bool last = where.stage(c) == where.stages(chunks) - 1;
    buffers += int64_t{slots[static_cast<size_t>(c)]} * ((first ? 0 : 1) + (last ? 0 : 1));
  }
  return buffers * Arena::aligned_bytes(dtype, boundary);
}

int Executor::acquire(int chunk, int microbatch) {
  const Key key{chunk, microbatch};
  auto found = taken_.find(key);
  if (found != taken_.end()) return found->second;
  std::vector<int>& free = free_slots_[static_cast<size_t>(chunk)];
  GPT_CHECK(!free.empty()) << "pipeline chunk " << chunk << " has no free stash slot for microbatch " << microbatch
                           << " (built with " << slots_[static_cast<size_t>(chunk)] << ")";
  const int slot = free.back();
  free.pop_back();
  taken_.emplace(key, slot);
  return slot;
}

int Executor::slot_of(int chunk, int microbatch) const {
  auto found = taken_.find({chunk, microbatch});
  GPT_CHECK(found != taken_.end()) << "pipeline chunk " << chunk << " microbatch " << microbatch << " holds no slot";
  return found->second;
}

void Executor::release(int chunk, int microbatch) {
  auto found = taken_.find({chunk, microbatch});
  GPT_CHECK(found != taken_.end()) << "releasing a slot microbatch " << microbatch << " does not hold";
  free_slots_[static_cast<size_t>(chunk)].push_back(found->second);
  taken_.erase(found);
}

void Executor::transfer(Context& ctx, Communicator& pipeline, const Step& step) {
  // Both ends of a rank pair must post their transfers in the same order (MPI and NCCL match them
  // in order): sort by what is moved, the microbatch and the virtual stage that sends it, which
  // both ends compute alike.
  struct Posted {
    std::tuple<bool, int, int> order;
    PeerTransfer transfer;
  };
  std::vector<Posted> posted;
  std::vector<Key> release_after_transfer;
  for (const Instruction& i : step.instructions) {
    GPT_CHECK(!is_compute_op(i.op)) << "a step mixes compute and transfers";
    GPT_CHECK(i.peer >= 0 && i.peer < size_ && i.peer != rank_) << to_string(i.op) << " with peer " << i.peer;
    const size_t c = static_cast<size_t>(i.chunk);
    const int stage = where_.stage(i.chunk);
    const Key key{i.chunk, i.microbatch};
    Tensor tensor;
    int sender = stage;
    switch (i.op) {
      case Op::kSendActivation: {
        auto found = outputs_.find(key);
        GPT_CHECK(found != outputs_.end()) << "send of an activation not computed: chunk " << i.chunk << " microbatch "
                                           << i.microbatch;
        tensor = found->second;
        outputs_.erase(found);
        // Forward only: the slot (whose stash holds the activation) is free once it is sent.
        if (has_backward_.count(key) == 0) release_after_transfer.push_back(key);
        break;
      }
      case Op::kSendGradient: {
        auto found = input_gradients_.find(key);
        GPT_CHECK(found != input_gradients_.end())
            << "send of a gradient not computed: chunk " << i.chunk << " microbatch " << i.microbatch;
        tensor = found->second;
        input_gradients_.erase(found);
        break;
      }
      case Op::kReceiveActivation:
        GPT_CHECK(!first_virtual_stage(i.chunk)) << "the first virtual stage receives no activation";
        tensor = activations_[c][static_cast<size_t>(acquire(i.chunk, i.microbatch))];
        sender = stage - 1;
        break;
      case Op::kReceiveGradient:
        GPT_CHECK(!last_virtual_stage(i.chunk)) << "the last virtual stage receives no gradient";
        tensor = gradients_[c][static_cast<size_t>(slot_of(i.chunk, i.microbatch))];
        sender = stage + 1;
        break;
      default:
        break;
    }
    const PeerTransfer::Kind kind = is_send_op(i.op) ? PeerTransfer::Kind::kSend : PeerTransfer::Kind::kReceive;
    posted.push_back({{is_gradient_op(i.op), i.microbatch, sender}, PeerTransfer{kind, tensor, i.peer}});
  }
  std::stable_sort(posted.begin(), posted.end(), [](const Posted& a, const Posted& b) { return a.order < b.order; });
  std::vector<PeerTransfer> transfers;
  for (const Posted& p : posted) transfers.push_back(p.transfer);
  pipeline.exchange(ctx, transfers);
  for (const Key& key : release_after_transfer) release(key.first, key.second);
}

void Executor::run(Context& ctx, Communicator& pipeline, std::span<const Step> steps) {
  GPT_CHECK(pipeline.size() == size_ && pipeline.rank() == rank_)
      << "pipeline group of " << pipeline.size() << " ranks (rank " << pipeline.rank() << "), schedule for " << size_;
  has_backward_.clear();
  last_backward_.clear();
  for (const Step& step : steps) {
    for (const Instruction& i : step.instructions) {
      if (i.op == Op::kBackward || i.op == Op::kBackwardInput) has_backward_.insert({i.chunk, i.microbatch});
      // The gradients are final after the chunk's last fused backward or last W (whose B, W
      // running in B order, is the chunk's last B).
      if (i.op == Op::kBackward || i.op == Op::kBackwardWeight) last_backward_[i.chunk] = i.microbatch;
    }
  }
  if (recording_) timeline_.clear();  // a run without recording leaves the last recorded one
  const Stopwatch since_start;
  for (const Step& step : steps) {
    GPT_CHECK(!step.instructions.empty()) << "empty pipeline step";
    const Instruction& first = step.instructions.front();
    if (!is_compute_op(first.op)) {
      const phase_timer::Scope timed(ctx, phase_timer::Phase::kPipelineSendRecv);
      transfer(ctx, pipeline, step);
      continue;
    }
    GPT_CHECK_EQ(step.instructions.size(), 1u) << "a compute step holds one instruction";
    if (recording_) {
      ctx.synchronize();
      timeline_.push_back({since_start.elapsed_seconds(), 0.0});
    }
    compute(ctx, first);
    if (recording_) {
      ctx.synchronize();
      timeline_.back().second = since_start.elapsed_seconds();
    }
  }
  GPT_CHECK(taken_.empty() && outputs_.empty() && input_gradients_.empty())
      << "pipeline steps ended with " << taken_.size() << " microbatches in flight and "
      << outputs_.size() + input_gradients_.size() << " results never sent";
}

void Executor::compute(Context& ctx, const Instruction& step) {
  GPT_CHECK(step.chunk >= 0 && step.chunk < static_cast<int>(chunks_.size())) << "chunk " << step.chunk;
  const size_t c = static_cast<size_t>(step.chunk);
  const Key key{step.chunk, step.microbatch};
  Stage& stage = *chunks_[c];
  const phase_timer::Scope timed(
      ctx, step.op == Op::kForward ? phase_timer::Phase::kForwardCompute : phase_timer::Phase::kBackwardCompute);
  if (step.op == Op::kForward) {
    const int slot = acquire(step.chunk, step.microbatch);
    std::optional<Tensor> input;
    if (!first_virtual_stage(step.chunk)) input = activations_[c][static_cast<size_t>(slot)];
    std::optional<Tensor> output = stage.forward(ctx, slot, step.microbatch, input);
    GPT_CHECK(output.has_value() != last_virtual_stage(step.chunk)) << "stage output of chunk " << step.chunk;
    if (output && hands_over(step.chunk)) {
      // The V's turn: chunk 1's receive buffer takes the activation, as a transfer would fill it.
      const Tensor& next = activations_[1][static_cast<size_t>(acquire(1, step.microbatch))];
      ops::copy(ctx, next, *output);
      if (has_backward_.count(key) == 0) release(step.chunk, step.microbatch);
    } else if (output && size_ > 1) {
      outputs_[key] = *output;  // the slot is released when it has been sent (forward only)
    } else if (has_backward_.count(key) == 0) {
      release(step.chunk, step.microbatch);
    }
  } else if (step.op == Op::kBackwardWeight) {
    stage.backward_weight(ctx, slot_of(step.chunk, step.microbatch), step.microbatch);
    release(step.chunk, step.microbatch);
  } else {
    const int slot = slot_of(step.chunk, step.microbatch);
    std::optional<Tensor> grad_output;
    if (!last_virtual_stage(step.chunk)) grad_output = gradients_[c][static_cast<size_t>(slot)];
    const bool last_of_step = last_backward_.at(step.chunk) == step.microbatch;
    const bool split = step.op == Op::kBackwardInput;
    std::optional<Tensor> grad_input =
        split ? stage.backward_input(ctx, slot, step.microbatch, grad_output, last_of_step)
              : stage.backward(ctx, slot, step.microbatch, grad_output, last_of_step);
    if (grad_input && size_ > 1 && !first_virtual_stage(step.chunk)) {
      if (step.chunk == 1 && where_.has_turn()) {
        // The V's turn: chunk 0's gradient buffer of the microbatch takes chunk 1's input gradient.
        ops::copy(ctx, gradients_[0][static_cast<size_t>(slot_of(0, step.microbatch))], *grad_input);
      } else {
        input_gradients_[key] = *grad_input;
      }
    }
    if (!split) release(step.chunk, step.microbatch);  // a split backward's slot waits for its W
  }
}

}  // namespace gpt::pipeline
