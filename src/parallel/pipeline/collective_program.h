// Every rank's collective calls in one iteration of a pipeline schedule, as data: the schedule
// (schedule.h) says which compute and transfer steps a pipeline rank runs; this expands each
// compute step into the collectives its layers issue, on which group, for every rank of a
// TP x CP x DP x PP world with Megatron's expert grid (ETP x EP x expert-DP over the same stages).
// collective_check.h proves that the ranks of every group issue the same calls in the same order
// and that no set of ranks waits on each other across groups (Megatron-LM #5749: an expert-parallel
// job hangs when the all-to-all and the data-parallel reduce-scatter are ordered differently on
// different ranks).
//
// The groups (members listed in the order of their own coordinate, as process_grid.h lists them):
//   tensor               same (cp, dp, pp), by tp                      'tensor-parallel'
//   context              same (tp, dp, pp), by cp                      'context-parallel'
//   data x context       same (tp, pp), by cp + CP dp                  'data-parallel' (CP = 1) or
//                                                                      'data-context-parallel'
//   expert exchange      same (edp, pp), by etp + ETP ep ('tp-ep')     'expert-tensor-and-model-parallel'
//   expert data          same (etp, ep, pp), by edp                    'expert-data-parallel'
//   embedding            the pipeline ranks of the first and the last  'embedding'
//                        virtual stage, same (tp, cp, dp)
//   pipeline transfers   point to point, between the ranks of one (tp, cp, dp) column
// Dense rank = tp + TP (cp + CP (dp + DP pp)), expert rank = etp + ETP (ep + EP (edp + EDP pp));
// with --use-tp-pp-dp-mapping pp and dp (edp) swap places (Megatron's RankGenerator orders). With
// EP 1 and ETP = TP (the one-rank MoE) the expert groups are the tensor and data x context groups.
//
// What one compute step of (chunk c, microbatch j) issues, layer by layer (each entry one call;
// a call stands for the group's operations of that block, which share its order):
//   forward, each layer of the chunk in order:
//     CP > 1: context  attention (the ring's or the all-to-all's exchanges)
//     TP > 1: tensor   attention (SP gather in, reduce-scatter out)
//     dense MLP:   TP > 1: tensor mlp
//     MoE MLP:     TP > 1: tensor router (every TP rank routes its position's T rows)
//                  exchange > 1: [alltoall: expert counts] expert dispatch, expert combine
//   input gradient (kBackward, kBackwardInput), each layer in reverse: the same calls, reversed
//     (combine's gradient before dispatch's, mlp before attention); the output layer (last stage)
//     first and the embedding (first stage) last issue none.
//   weight gradients: gradients_ready per layer group (embedding, each layer, output), in reverse
//     (param_observer.h), right after the group's input gradient in a fused backward, in its W
//     pass with a split backward. With the gradients final (the chunk's last backward or W of the
//     step: last_of_step) and overlapped reduction: TP > 1: tensor grad-sum (SP-replicated
//     parameters), then the group's dense bucket over data x context and, for a MoE layer, its
//     expert bucket over expert data (started, waited for at the end). ZeRO-2 reduces every
//     microbatch's; without overlap every bucket starts after the last step. Megatron's DDP past
//     the first pipeline rank: one bucket per chunk, started after the chunk's last group.
//   ZeRO-3: before each group's forward and its input gradient, its parameters gathered over data x
//     context (and a MoE layer's expert parameters over expert data).
//   after the last step: every started reduction waited for; the tied embedding summed over the
//     embedding group (training, PP > 1, the two ends on different ranks); the distributed
//     optimizer's updated shards gathered group by group (dense over data x context, expert over
//     expert data), or with --overlap-param-gather before each group's first forward of a step.
// Groups of one rank issue nothing (a SelfCommunicator).
#pragma once

#include <string>
#include <vector>

#include "absl/status/statusor.h"
#include "parallel/pipeline/schedule.h"

namespace gpt::pipeline {

struct GridLayout {
  int tensor = 1, context = 1, data = 1, pipeline = 1;
  int expert_model = 1;   // EP, --expert-model-parallel-size
  int expert_tensor = 0;  // ETP, --expert-tensor-parallel-size; 0 = TP
  bool tp_pp_dp = false;  // --use-tp-pp-dp-mapping
  int world() const { return tensor * context * data * pipeline; }
  int etp() const { return expert_tensor > 0 ? expert_tensor : tensor; }
  // EDP = world / (ETP x EP x PP).
  int expert_data() const { return world() / (etp() * expert_model * pipeline); }
};

enum class GroupKind { kTensor, kContext, kDataContext, kExpertExchange, kExpertData, kEmbedding };
// The communicator's name for this kind (process_grid's names; the expert ones what the expert
// grid should call its groups so that a timeout names them alike).
std::string group_name(GroupKind kind, const GridLayout& grid);

enum class CallOp {
  kContextAttention,
  kTensorAttention,
  kTensorMlp,
  kTensorRouter,
  kExpertCounts,
  kExpertDispatch,
  kExpertCombine,
  kTensorGradSum,
  kGradientReduce,  // a dense bucket over data x context, or an expert bucket over expert data
  kEmbeddingSum,
  kParameterGather,  // ZeRO-3: a group's dense (or expert) parameters gathered before a use
};
const char* to_string(CallOp op);

enum class Dispatcher { kAllGather, kAllToAll };
// Where the distributed optimizer's updated shards are gathered (ZeRO-1 and ZeRO-2).
enum class UpdatedShards {
  kNone,            // no distributed optimizer (or ZeRO-3, which gathers before every use)
  kAfterStep,       // after the optimizer step, group by group in forward order
  kInFirstForward,  // --overlap-param-gather: before each group's first forward of the next step
};
enum class GradientReduction {
  kOverlapped,       // --overlap-grad-reduce: a bucket starts when its gradients are final
  kEveryMicrobatch,  // ZeRO-2: every microbatch's gradients reduce-scattered when ready
  kAfterBackward,    // every bucket started after the last step
};

struct ModelLayout {
  // [virtual stage]: that stage's layers, in order; a layer's entry is true for a MoE layer.
  // Global layer numbers count through the stages.
  std::vector<std::vector<bool>> stage_moe;
  Dispatcher dispatcher = Dispatcher::kAllToAll;
  GradientReduction reduction = GradientReduction::kOverlapped;
  // Megatron's DDP buckets only the first pipeline rank's parameters: on the others each chunk's
  // dense (and expert) parameters are one bucket, started after the chunk's last group.
  bool chunk_buckets_after_first_rank = false;
  bool gather_parameters = false;  // ZeRO-3: each group gathered before its forward and its backward
  UpdatedShards updated_shards = UpdatedShards::kNone;
  bool tied_embedding = true;
};
// num_layers split evenly over `stages` virtual stages (it must divide); layer l is MoE when
// moe_pattern[l % size] (Megatron's --moe-layer-freq as a pattern; {true}: every layer).
ModelLayout even_model_layout(int num_layers, int stages, const std::vector<bool>& moe_pattern);

// One call as its rank issues it. `layer`: the global layer, -1 for the embedding, num_layers
// for the output layer, -2 for a whole chunk's bucket; `microbatch` and `chunk` -1 where the call
// belongs to no one pass.
struct Call {
  GroupKind group;
  CallOp op;
  int microbatch = -1, chunk = -1, layer = -1;
  bool expert = false;   // kGradientReduce: the expert bucket (else the dense one)
  bool blocking = true;  // false: started here, waited for at the end of the iteration
  bool operator==(const Call&) const = default;
};
// "expert dispatch mb3 c1 L5", and with its group: "... on expert-tensor-and-model-parallel".
std::string label(const Call& call);
std::string to_string(const Call& call, const GridLayout& grid);

// A rank's program: its calls and its pipeline transfer batches in the order it issues them.
struct Event {
  enum class Kind { kCall, kTransfers, kWaitReductions };
  Kind kind;
  Call call;                           // kCall
  std::vector<Instruction> transfers;  // kTransfers: peer is a pipeline rank, as in the schedule
};

struct WorldProgram {
  GridLayout grid;
  // [world rank] -> its pipeline rank, and [world rank][kind] -> index into `groups`, -1 when the
  // rank's group of that kind has one member.
  std::vector<int> pipeline_rank;
  std::vector<std::vector<int>> group_of;
  struct Group {
    GroupKind kind;
    std::vector<int> members;  // world ranks
  };
  std::vector<Group> groups;
  // [pipeline rank][column]: the world rank at that stage of the (tp, cp, dp) column `column`.
  std::vector<std::vector<int>> column_rank;
  std::vector<int> column_of;             // [world rank]
  std::vector<std::vector<Event>> ranks;  // [world rank]
};

// The grid's groups and every rank's program. Errors (InvalidArgument, one line naming the sizes):
// sizes below 1, ETP x EP x PP not dividing the world, a stage layout that is not p x v stages, or
// an expert grid whose pipeline groups differ from the dense grid's (Megatron refuses it: with
// --use-tp-pp-dp-mapping ETP x EP must equal TP x CP unless PP = 1; EP 1 with ETP = TP excepted).
absl::StatusOr<WorldProgram> collective_program(const GridLayout& grid, const Schedule& schedule,
                                                const ModelLayout& model);

}  // namespace gpt::pipeline
