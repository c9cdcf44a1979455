// The pipeline schedule as data: for each pipeline rank, the ordered steps it runs in one training
// (or evaluation) iteration, and the generators of Megatron's schedules. The executor runs a
// Schedule; the simulator (simulator.h) proves it matches and deadlock-free and measures its bubble.
//
// Model chunks follow Megatron's interleaving: the layers are cut into p * v virtual stages of
// equal size and rank r's chunk c is virtual stage c * p + r. Microbatch j's activation leaving
// (rank r, chunk c) goes to (rank r + 1, chunk c), or from rank p - 1 to (rank 0, chunk c + 1);
// its gradient goes the reverse way. The first virtual stage (rank 0, chunk 0) receives no
// activation (it reads its tokens) and the last (rank p - 1, chunk v - 1) sends none (its loss
// starts the backward). ZB-V places the chunks in a V instead (Placement::kV below).
#pragma once

#include <string>
#include <string_view>
#include <vector>

#include "absl/status/status.h"
#include "absl/status/statusor.h"

namespace gpt::pipeline {

// kBackward is the fused backward (input and weight gradients together). A zero-bubble schedule
// splits it: kBackwardInput (B, the input gradient, which the previous stage waits for) and later
// kBackwardWeight (W, the weight gradients, which nothing waits for until the optimizer step). A
// chunk runs its W passes in the order of its B passes (the model keeps them FIFO), and a
// microbatch holds its stash slot until its W.
enum class Op {
  kForward,
  kBackward,
  kSendActivation,
  kReceiveActivation,
  kSendGradient,
  kReceiveGradient,
  kBackwardInput,
  kBackwardWeight,
};

struct Instruction {
  Op op;
  int chunk;       // model chunk on this rank, 0..v-1; for a transfer, the chunk that produces
                   // (send) or consumes (receive) the tensor
  int microbatch;  // 0..m-1
  int peer;        // pipeline rank at the other end of a transfer; -1 for compute
  bool operator==(const Instruction&) const = default;
};

// Either exactly one compute instruction, or one or more transfers that the executor posts together
// as one batch and waits for together (so two ranks exchanging in both directions cannot
// deadlock). Transfers are listed in the order they are posted: activations before gradients, then
// by microbatch, then by the sending virtual stage. Two transfers between the same two ranks in the
// same direction are matched in posting order (as NCCL and MPI match them), and this order makes
// both ends list them alike.
struct Step {
  std::vector<Instruction> instructions;
};

// Where the virtual stages live. kLoop is Megatron's (rank r's chunk c is virtual stage c p + r);
// kV (ZB-V, v = 2) puts chunk 0 on ranks 0..p-1 and chunk 1 on ranks p-1..0: rank r holds stages r
// and 2p - 1 - r, so rank p - 1 hands stage p - 1's activation to its own chunk 1 (and the gradient
// back) without a transfer, and rank 0 holds both the first and the last stage.
enum class Placement { kLoop, kV };

struct Schedule {
  int pipeline_size;                    // p
  int virtual_size;                     // v, model chunks per rank
  int microbatches;                     // m
  std::vector<std::vector<Step>> ranks;  // ranks[r] = rank r's ordered steps
  Placement placement = Placement::kLoop;
};

enum class ScheduleKind {
  kAllForwardAllBackward,  // GPipe: every forward, then every backward
  kOneFOneB,               // Megatron's forward_backward_pipelining_without_interleaving (v = 1)
  kInterleaved,            // Megatron's forward_backward_pipelining_with_interleaving (v > 1)
  kZeroBubbleH1,           // ZB-H1 (Qi et al., ICLR 2024; v = 1): B and W split, 1F1B's activation
                           // memory, W passes filling the bubble (about a third of 1F1B's)
  kZeroBubbleV,            // ZB-V (v = 2, Placement::kV): split backward, two chunks per rank in a
                           // V, 1F1B's peak activation memory
};

// "afab", "1f1b", "interleaved", "zb-h1", "zb-v".
absl::StatusOr<ScheduleKind> parse_schedule_kind(std::string_view name);
const char* to_string(ScheduleKind kind);
// The schedule Megatron runs for this layout: interleaved when v > 1, else 1F1B.
ScheduleKind default_schedule_kind(int virtual_size);

// Checks a layout the way Megatron's arguments do and names the flags to change:
// num_layers divisible by p (layers_per_virtual_stage == 0, no interleaving) or by
// p * layers_per_virtual_stage; p <= num_layers; v > 1 needs p > 1; the interleaved schedule needs
// the number of microbatches m (global batch / (micro batch x data-parallel size)) to be a multiple
// of p, or with a microbatch group size n (--microbatch-group-size-per-virtual-pipeline-stage;
// 0 = p, Megatron's default) Megatron's rules: p <= n <= m, and the last group's m % n
// microbatches 0 or at least p.
absl::Status validate_pipeline_layout(int num_layers, int pipeline_size, int layers_per_virtual_stage,
                                      int microbatches, int microbatch_group = 0);
// v for a layout that validate_pipeline_layout accepts: num_layers / (p * layers_per_virtual_stage),
// or 1 without --num-layers-per-virtual-pipeline-stage.
absl::StatusOr<int> virtual_pipeline_size(int num_layers, int pipeline_size, int layers_per_virtual_stage);

// One training iteration of `kind` for p ranks, v chunks per rank, m microbatches. kOneFOneB and
// kZeroBubbleH1 need v = 1 and kInterleaved v > 1 (and m a multiple of p, or the group rules of
// validate_pipeline_layout); kAllForwardAllBackward takes any v (with v > 1 its forwards follow
// the interleaved order). `microbatch_group` is Megatron's microbatch_group_size_per_vp_stage n
// (0 = p): the interleaved order runs the microbatches in groups of n, each chunk running the
// group's n microbatches before the next chunk starts (get_schedule_table; the last group takes
// the m % n left over); it is not used without interleaving.
absl::StatusOr<Schedule> make_schedule(ScheduleKind kind, int pipeline_size, int virtual_size, int microbatches,
                                       int microbatch_group = 0);
// Evaluation: every microbatch's forwards in the training schedule's order, no backward and no
// gradient transfers. With Placement::kV, ZB-V's forwards (v = 2).
absl::StatusOr<Schedule> make_forward_only_schedule(int pipeline_size, int virtual_size, int microbatches,
                                                    Placement placement = Placement::kLoop, int microbatch_group = 0);
// Where a schedule kind puts the chunks: kV for ZB-V, else kLoop.
Placement schedule_placement(ScheduleKind kind);

// Lowers per-rank orders of compute instructions (v = 1 or more chunks, Megatron's placement) to a
// Schedule: the data flow between virtual stages is simulated with the given costs (per
// instruction: F, B = kBackward or kBackwardInput, W), each transfer is keyed by the time its
// consumer starts in that ideal timeline, and each rank gets, before each of its computes, one
// batch with every transfer keyed at or before that time (sends after their producer). Both ends
// of a transfer post it in batches of the same key, so the batched exchanges pair up and the
// schedule cannot deadlock (the rank stuck at the smallest key always finds its peers there);
// with unit costs (every compute boundary at an integer time) no rank waits for a peer in the
// simulation. Errors when an order misses or repeats an instruction or cannot run (a consumer
// before its producer on the same rank, a cycle between ranks).
struct ComputeCosts {
  double forward = 1, backward_input = 1, weight = 1;  // per microbatch and chunk
};
absl::StatusOr<Schedule> lower_compute_orders(int pipeline_size, int virtual_size, int microbatches,
                                              const std::vector<std::vector<Instruction>>& orders,
                                              const ComputeCosts& costs = {}, Placement placement = Placement::kLoop);

// What the generators promise, for the report and the tests. Bubble fraction as the simulator
// defines it (simulator.h), with uniform costs and free transfers: (p - 1) / m without
// interleaving, (p - 1) / (v * m) with v > 1 (AFAB included); for ZB-H1 with F = B = W (Qi et
// al.: a bubble of (p - 1)(T_F + T_B - T_W) against 1F1B's (p - 1)(T_F + T_B + T_W)),
// (p - 1) / (3 m); for ZB-V with F = B = W per chunk, (p - 1) / (6 m): only the last rank's wait for
// its first activation (p - 1 chunk forwards) is left, on 6 m chunk passes per rank.
double expected_bubble_fraction(ScheduleKind kind, int pipeline_size, int virtual_size, int microbatches);
// The most (chunk, microbatch) pairs rank r holds between forward and backward:
//   AFAB        m * v
//   1F1B        min(p - r, m)                                   (Megatron's p - r - 1 warm-up + 1)
//   interleaved min((p - r - 1) * 2 + (v - 1) * n + 1, m * v)   (warm-up + 1; n the microbatch
//                                                               group, p by default)
//   ZB-H1       min(p, m)                                       (1F1B's most, counted until W)
//   ZB-V        at most 2 p (chunk, microbatch) pairs, p microbatches' worth (1F1B's most)
// Each pair holds 1/v of a microbatch's activations, so rank 0 of the interleaved schedule holds
// p + (p - 1) / v microbatches' worth, Megatron's bound.
int expected_peak_live(ScheduleKind kind, int pipeline_size, int virtual_size, int microbatches, int rank,
                       int microbatch_group = 0);

// Virtual-stage topology.
inline int virtual_stage(int pipeline_size, int rank, int chunk) { return chunk * pipeline_size + rank; }
inline bool is_first_virtual_stage(int pipeline_size, int rank, int chunk) {
  return virtual_stage(pipeline_size, rank, chunk) == 0;
}
inline bool is_last_virtual_stage(int pipeline_size, int virtual_size, int rank, int chunk) {
  return virtual_stage(pipeline_size, rank, chunk) == pipeline_size * virtual_size - 1;
}
// The same for any placement (kLoop: the functions above).
int virtual_stage(Placement placement, int pipeline_size, int rank, int chunk);
struct StageLocation {
  int rank, chunk;
};
StageLocation stage_location(Placement placement, int pipeline_size, int stage);
// Where activations go (next) and gradients go (previous), around the ring of ranks.
inline int next_pipeline_rank(int pipeline_size, int rank) { return (rank + 1) % pipeline_size; }
inline int previous_pipeline_rank(int pipeline_size, int rank) { return (rank + pipeline_size - 1) % pipeline_size; }

bool is_compute_op(Op op);
bool is_backward_op(Op op);  // kBackward or kBackwardInput: the pass that produces the input gradient
bool is_gradient_op(Op op);  // send or receive of a gradient
bool is_send_op(Op op);
const char* to_string(Op op);
// "F c1 mb3", "Bi c0 mb2", "W c0 mb2", "send-activation c1 mb3 -> rank 2", "receive-gradient c0 mb5 <- rank 1".
std::string to_string(const Instruction& instruction);
// The instructions joined by " + ".
std::string to_string(const Step& step);

}  // namespace gpt::pipeline
