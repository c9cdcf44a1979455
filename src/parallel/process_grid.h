// The process grid: world = TP x CP x DP x PP in one of Megatron's two rank orders (RankGenerator's
// "tp-cp-ep-dp-pp" by default: tensor-parallel fastest, then context-parallel, then data-parallel,
// then pipeline, rank = tp + TP * (cp + CP * (dp + DP * pp)); "tp-cp-ep-pp-dp" with
// --use-tp-pp-dp-mapping: rank = tp + TP * (cp + CP * (pp + PP * dp))), and one communicator per
// group. Context parallelism splits each sequence over the CP
// ranks; they read the same samples, so gradients are reduced over the combined data x context
// group (Megatron's dp-cp group) while samples are distributed over the data-parallel group alone.
// With --num-distributed-optimizer-instances N the data x context group (in its members' order,
// place cp + CP * dp) is cut into N instances of DP x CP / N consecutive members (Megatron's
// intra_partial_data_parallel_group_with_cp), and the members at the same place of every instance
// form the group across instances (its inter_distributed_optimizer_instance_group: Megatron's
// create_hierarchical_groups over [DP x CP / N, N]).
// With --hierarchical-context-parallel-sizes [A, P] (--cp-comm-type a2a+p2p) the context group is
// cut the same way (Megatron's create_hierarchical_groups over [A, P]): level 0 (the all-to-all)
// are A consecutive context ranks, level 1 (the ring) the P ranks at the same place in each of them.
//
// The expert layers have a second grid over the same world (Megatron's expert RankGenerator, with
// cp = 1): expert tensor parallelism ETP (default TP) x expert parallelism EP x expert data
// parallelism EDP = world / (ETP x EP x PP) x PP, in the same order: rank = etp + ETP*(ep + EP*(edp +
// EDP*pp)), or with --use-tp-pp-dp-mapping rank = etp + ETP*(ep + EP*(pp + PP*edp)). Both grids
// agree on every rank's pipeline stage (checked). An MoE layer exchanges tokens over the ETP x EP
// ranks of one (edp, pp) ("tp-ep", the dispatcher's group); expert parameters' gradients are summed
// over EDP. With EP = 1 and ETP = TP those groups are the tensor- and data x context groups
// themselves (and share their communicators).
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "parallel/comm/communicator.h"

namespace gpt {

// Megatron's RankGenerator orders (the dense grid's ep is 1, so "ep" drops out of its formula).
enum class RankOrder {
  kTpCpDpPp,  // Megatron's default, "tp-cp-ep-dp-pp": the pipeline stages are the slowest index
  kTpCpPpDp,  // --use-tp-pp-dp-mapping, "tp-cp-ep-pp-dp": the data-parallel replicas are
};

struct GridShape {
  int tensor = 1;
  int pipeline = 1;
  int data = 1;
  int context = 1;
  RankOrder order = RankOrder::kTpCpDpPp;
  int optimizer_instances = 1;  // distributed-optimizer instances; divides data x context
  int context_inner = 0;        // a2a+p2p's level-0 (all-to-all) size, dividing context; 0: no levels
  int expert_model = 1;         // EP (--expert-model-parallel-size)
  int expert_tensor = 0;        // ETP (--expert-tensor-parallel-size); 0: TP
  // The model has expert layers: the expert grid is checked and its groups built (a dense model's
  // accessors fall back to the dense groups, as nothing uses them).
  bool expert_layers = false;
  int world() const { return tensor * context * pipeline * data; }
  int expert_tensor_size() const { return expert_tensor > 0 ? expert_tensor : tensor; }
  // EDP = world / (ETP x EP x PP).
  int expert_data_size() const { return world() / (expert_tensor_size() * expert_model * pipeline); }
  // The expert grid's 'tp-ep', 'dp' and 'tp-ep-pp' groups are the dense grid's tensor-parallel,
  // data x context and model-parallel groups (ETP x EP = TP, and the order places them alike:
  // pipeline-last, or CP = 1, or PP = 1): the one-rank MoE layout and EP folded onto TP.
  bool expert_groups_are_dense() const;
};

struct GridCoordinates {
  int tensor = 0;
  int pipeline = 0;
  int data = 0;
  int context = 0;
};

// A rank's place in the expert grid.
struct ExpertCoordinates {
  int tensor = 0;  // etp
  int model = 0;   // ep
  int data = 0;    // edp
  int pipeline = 0;
};

// True when the build includes NCCL (the CUDA backend found nccl.h and libnccl).
bool nccl_available();

// Megatron's rank order (shape.order).
int grid_rank(const GridShape& shape, const GridCoordinates& coordinates);
GridCoordinates grid_coordinates(const GridShape& shape, int rank);
ExpertCoordinates expert_coordinates(const GridShape& shape, int rank);
// Fatal unless the expert grid divides the world and puts every rank on its dense pipeline stage
// (the arguments refuse such layouts first, naming the flags).
void check_expert_grid(const GridShape& shape);
// Megatron's name of the order: "tp-cp-ep-dp-pp" or "tp-cp-ep-pp-dp".
const char* rank_order_name(RankOrder order);

// The groups of one kind, as lists of world ranks: each group's members in the order of their own
// coordinate (a group of several kinds, e.g. data x context, with the first-named kind fastest, as
// Megatron's RankGenerator lists them), groups in the order of their lowest member.
enum class GridGroup {
  kTensor,
  kContext,
  kData,
  kDataContext,
  kPipeline,
  kModelParallel,
  kOptimizerInstance,         // the data x context members of one distributed-optimizer instance
  kAcrossOptimizerInstances,  // one member of each instance, at the same place in it
  kContextInner,              // a2a+p2p level 0: context_inner consecutive context ranks
  kContextOuter,              // a2a+p2p level 1: the context ranks at one place of every level-0 group
  kExpertTensor,              // the expert grid's 'tp': ETP ranks
  kExpertModel,               // 'ep': the EP ranks of one (etp, edp, pp)
  kExpertExchange,            // 'tp-ep': ETP x EP ranks of one (edp, pp), etp fastest
  kExpertData,                // 'dp': the EDP ranks of one (etp, ep, pp)
  kExpertTensorModelPipeline, // 'tp-ep-pp': the ETP x EP x PP ranks of one edp
};
// The members of one distributed-optimizer instance: data x context / instances.
int optimizer_instance_size(const GridShape& shape);
std::vector<std::vector<int>> grid_groups(const GridShape& shape, GridGroup kind);

class ProcessGrid {
 public:
  // A world of one process: every group is the process itself.
  static std::unique_ptr<ProcessGrid> single();

  ProcessGrid(GridShape shape, int world_rank, std::unique_ptr<Communicator> world,
              std::unique_ptr<Communicator> tensor, std::unique_ptr<Communicator> data,
              std::unique_ptr<Communicator> pipeline, std::unique_ptr<Communicator> embedding,
              std::unique_ptr<Communicator> model_parallel, std::unique_ptr<Communicator> context = nullptr,
              std::unique_ptr<Communicator> data_context = nullptr,
              std::unique_ptr<Communicator> optimizer_instance = nullptr,
              std::unique_ptr<Communicator> across_optimizer_instances = nullptr,
              std::unique_ptr<Communicator> context_inner = nullptr,
              std::unique_ptr<Communicator> context_outer = nullptr);

  // The expert grid's own communicators (grid_split.cc builds them only where they differ from the
  // dense groups; a null one means the dense group of the same members, or a group of one).
  struct ExpertGroups {
    std::unique_ptr<Communicator> tensor, model, exchange, data, tensor_model_pipeline;
  };
  void set_expert_groups(ExpertGroups groups);

  const GridShape& shape() const { return shape_; }
  int world_rank() const { return world_rank_; }
  int world_size() const { return shape_.world(); }
  const GridCoordinates& coordinates() const { return coordinates_; }
  bool is_first_pipeline_stage() const { return coordinates_.pipeline == 0; }
  bool is_last_pipeline_stage() const { return coordinates_.pipeline == shape_.pipeline - 1; }
  // The rank that prints the training log (Megatron: the last rank).
  bool is_logging_rank() const { return world_rank_ == world_size() - 1; }

  Communicator& world() const { return *world_; }
  Communicator& tensor() const { return *tensor_; }
  Communicator& data() const { return *data_; }
  // The ranks that hold the other pieces of this rank's sequences (same tp, dp, pp).
  Communicator& context() const { return *context_; }
  // --cp-comm-type a2a+p2p's two levels of the context group (shape().context_inner > 0 only): the
  // all-to-all over context_inner() (context rank % A), then the ring over context_outer() (its
  // rank: context rank / A).
  Communicator& context_inner() const { return *context_inner_; }
  Communicator& context_outer() const { return *context_outer_; }
  bool has_context_levels() const { return context_inner_ != nullptr; }
  // Data x context ranks of one (tp, pp) position: gradients are reduced (and ZeRO shards
  // distributed) over this group; the data-parallel group itself when CP = 1.
  Communicator& data_context() const { return data_context_ ? *data_context_ : *data_; }
  // The data x context ranks of this rank's distributed-optimizer instance: the distributed
  // optimizer's gradients are reduce-scattered and its parameters all-gathered over this group
  // (data_context() with one instance).
  Communicator& optimizer_instance() const { return optimizer_instance_ ? *optimizer_instance_ : data_context(); }
  // The ranks at this rank's place in every instance (they hold the same shards): the reduced
  // shards are all-reduced over it. Of size 1 with one instance.
  Communicator& across_optimizer_instances() const { return *across_optimizer_instances_; }
  Communicator& pipeline() const { return *pipeline_; }
  // First and last pipeline stage of one (tp, dp) column: ties the embedding and the LM head.
  Communicator& embedding() const { return *embedding_; }
  // TP x PP ranks of one data-parallel replica and context-parallel rank (Megatron's model-parallel
  // group: each parameter once).
  Communicator& model_parallel() const { return *model_parallel_; }

  // The expert grid (see the top of this file).
  const ExpertCoordinates& expert_coordinates() const { return expert_coordinates_; }
  // 'tp' of the expert grid: the ranks holding the other slices of this rank's experts.
  Communicator& expert_tensor() const { return expert_.tensor ? *expert_.tensor : *tensor_; }
  // 'ep': the ranks holding the other experts, at this rank's etp and edp.
  Communicator& expert_model() const { return expert_.model ? *expert_.model : *expert_self_; }
  // 'tp-ep': the token dispatcher's group (every rank holding some slice of some expert, one edp).
  Communicator& expert_exchange() const { return expert_.exchange ? *expert_.exchange : *tensor_; }
  // 'dp': expert parameters' gradients are summed, and their ZeRO shards spread, over it.
  Communicator& expert_data() const { return expert_.data ? *expert_.data : data_context(); }
  // 'tp-ep-pp': every expert parameter of one edp once (the expert parameters' gradient norm).
  Communicator& expert_tensor_model_pipeline() const {
    return expert_.tensor_model_pipeline ? *expert_.tensor_model_pipeline : *model_parallel_;
  }

  // Moves every group of more than one rank onto NCCL (GPU buffers, one rank per GPU), using the
  // current (MPI) communicators to distribute the NCCL ids; they stay alive as bootstrap.
  // Only valid in builds with NCCL (nccl_available()).
  void adopt_nccl(Context& ctx, double timeout_seconds);

  // "world 8 = TP 2 x CP 1 x PP 2 x DP 2" plus the ranks of every group, for rank 0 to print.
  std::string describe() const;

 private:
  GridShape shape_;
  int world_rank_;
  GridCoordinates coordinates_;
  std::unique_ptr<Communicator> world_, tensor_, data_, pipeline_, embedding_, model_parallel_, context_;
  std::unique_ptr<Communicator> data_context_;  // null when CP = 1 (data_ is that group)
  std::unique_ptr<Communicator> optimizer_instance_;  // null with one instance (data_context() is that group)
  std::unique_ptr<Communicator> across_optimizer_instances_;
  std::unique_ptr<Communicator> context_inner_, context_outer_;  // null without a2a+p2p's levels
  ExpertCoordinates expert_coordinates_;
  ExpertGroups expert_;                          // null members: the dense group (see the accessors)
  std::unique_ptr<Communicator> expert_self_;    // expert_model() with EP = 1
  std::vector<std::unique_ptr<Communicator>> bootstrap_;  // MPI groups replaced by NCCL ones
};

}  // namespace gpt
