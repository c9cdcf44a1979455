#include "parallel/process_grid.h"

#include <algorithm>
#include <sstream>
#include <utility>

#include "core/check.h"
#include "parallel/comm/self_communicator.h"

namespace gpt {

int grid_rank(const GridShape& shape, const GridCoordinates& c) {
  const int tensor_context = c.tensor + shape.tensor * c.context;
  const int tc = shape.tensor * shape.context;
  if (shape.order == RankOrder::kTpCpPpDp) return tensor_context + tc * (c.pipeline + shape.pipeline * c.data);
  return tensor_context + tc * (c.data + shape.data * c.pipeline);
}

GridCoordinates grid_coordinates(const GridShape& shape, int rank) {
  GridCoordinates c;
  c.tensor = rank % shape.tensor;
  c.context = (rank / shape.tensor) % shape.context;
  const int outer = rank / (shape.tensor * shape.context);  // the (dp, pp) pair in the order's nesting
  if (shape.order == RankOrder::kTpCpPpDp) {
    c.pipeline = outer % shape.pipeline;
    c.data = outer / shape.pipeline;
  } else {
    c.data = outer % shape.data;
    c.pipeline = outer / shape.data;
  }
  return c;
}

bool GridShape::expert_groups_are_dense() const {
  return expert_tensor_size() * expert_model == tensor &&
         (order == RankOrder::kTpCpDpPp || context == 1 || pipeline == 1);
}

ExpertCoordinates expert_coordinates(const GridShape& shape, int rank) {
  const int etp = shape.expert_tensor_size(), ep = shape.expert_model, edp = shape.expert_data_size();
  ExpertCoordinates c;
  c.tensor = rank % etp;
  c.model = (rank / etp) % ep;
  const int outer = rank / (etp * ep);  // the (edp, pp) pair in the order's nesting
  if (shape.order == RankOrder::kTpCpPpDp) {
    c.pipeline = outer % shape.pipeline;
    c.data = outer / shape.pipeline;
  } else {
    c.data = outer % edp;
    c.pipeline = outer / edp;
  }
  return c;
}

void check_expert_grid(const GridShape& shape) {
  const int etp = shape.expert_tensor_size();
  GPT_CHECK(etp >= 1 && shape.expert_model >= 1 && shape.world() % (etp * shape.expert_model * shape.pipeline) == 0)
      << "expert grid ETP " << etp << " x EP " << shape.expert_model << " x PP " << shape.pipeline
      << " does not divide the world of " << shape.world();
  for (int rank = 0; rank < shape.world(); ++rank) {
    GPT_CHECK_EQ(expert_coordinates(shape, rank).pipeline, grid_coordinates(shape, rank).pipeline)
        << "rank " << rank << ": the expert grid puts it on another pipeline stage than the dense grid";
  }
}

const char* rank_order_name(RankOrder order) {
  return order == RankOrder::kTpCpPpDp ? "tp-cp-ep-pp-dp" : "tp-cp-ep-dp-pp";
}

namespace {

// The level-0 size of the context group's two levels (the whole group when it has none).
int context_inner_size(const GridShape& shape) {
  const int inner = shape.context_inner > 0 ? shape.context_inner : shape.context;
  GPT_CHECK(shape.context % inner == 0) << "context-parallel level 0 of " << inner << " ranks in CP " << shape.context;
  return inner;
}

// A rank's place in its data x context group (Megatron's dp-cp group lists its members so).
int data_context_place(const GridShape& shape, const GridCoordinates& c) { return c.context + shape.context * c.data; }

// Two ranks of the expert grid share a group of `kind` when they agree on every coordinate outside it.
bool same_expert_group(GridGroup kind, const ExpertCoordinates& a, const ExpertCoordinates& b) {
  const bool tp = a.tensor == b.tensor, ep = a.model == b.model, dp = a.data == b.data, pp = a.pipeline == b.pipeline;
  switch (kind) {
    case GridGroup::kExpertTensor: return ep && dp && pp;
    case GridGroup::kExpertModel: return tp && dp && pp;
    case GridGroup::kExpertExchange: return dp && pp;
    case GridGroup::kExpertData: return tp && ep && pp;
    case GridGroup::kExpertTensorModelPipeline: return dp;
    default: return false;
  }
}

int place_in_expert_group(GridGroup kind, const GridShape& shape, const ExpertCoordinates& c) {
  const int etp = shape.expert_tensor_size(), ep = shape.expert_model;
  switch (kind) {
    case GridGroup::kExpertTensor: return c.tensor;
    case GridGroup::kExpertModel: return c.model;
    case GridGroup::kExpertExchange: return c.tensor + etp * c.model;
    case GridGroup::kExpertData: return c.data;
    case GridGroup::kExpertTensorModelPipeline: return c.tensor + etp * (c.model + ep * c.pipeline);
    default: return 0;
  }
}

bool is_expert_group(GridGroup kind) {
  return kind == GridGroup::kExpertTensor || kind == GridGroup::kExpertModel || kind == GridGroup::kExpertExchange ||
         kind == GridGroup::kExpertData || kind == GridGroup::kExpertTensorModelPipeline;
}

// Two ranks share a group of `kind` when they agree on every coordinate outside it.
bool same_group(GridGroup kind, const GridShape& shape, const GridCoordinates& a, const GridCoordinates& b) {
  const bool tp = a.tensor == b.tensor, cp = a.context == b.context, dp = a.data == b.data,
             pp = a.pipeline == b.pipeline;
  const int instance_size = optimizer_instance_size(shape);
  const int place_a = data_context_place(shape, a), place_b = data_context_place(shape, b);
  switch (kind) {
    case GridGroup::kTensor: return cp && dp && pp;
    case GridGroup::kContext: return tp && dp && pp;
    case GridGroup::kData: return tp && cp && pp;
    case GridGroup::kDataContext: return tp && pp;
    case GridGroup::kPipeline: return tp && cp && dp;
    case GridGroup::kModelParallel: return cp && dp;
    case GridGroup::kOptimizerInstance: return tp && pp && place_a / instance_size == place_b / instance_size;
    case GridGroup::kAcrossOptimizerInstances: return tp && pp && place_a % instance_size == place_b % instance_size;
    case GridGroup::kContextInner:
      return tp && dp && pp && a.context / context_inner_size(shape) == b.context / context_inner_size(shape);
    case GridGroup::kContextOuter:
      return tp && dp && pp && a.context % context_inner_size(shape) == b.context % context_inner_size(shape);
    default: return false;
  }
}

// A member's place in its group: its own coordinates, first-named kind fastest (the MPI split keys).
int place_in_group(GridGroup kind, const GridShape& shape, const GridCoordinates& c) {
  switch (kind) {
    case GridGroup::kTensor: return c.tensor;
    case GridGroup::kContext: return c.context;
    case GridGroup::kData: return c.data;
    case GridGroup::kDataContext: return c.context + shape.context * c.data;
    case GridGroup::kPipeline: return c.pipeline;
    case GridGroup::kModelParallel: return c.tensor + shape.tensor * c.pipeline;
    case GridGroup::kOptimizerInstance: return data_context_place(shape, c) % optimizer_instance_size(shape);
    case GridGroup::kAcrossOptimizerInstances: return data_context_place(shape, c) / optimizer_instance_size(shape);
    case GridGroup::kContextInner: return c.context % context_inner_size(shape);
    case GridGroup::kContextOuter: return c.context / context_inner_size(shape);
    default: return 0;
  }
}

}  // namespace

int optimizer_instance_size(const GridShape& shape) {
  GPT_CHECK(shape.optimizer_instances >= 1 && (shape.data * shape.context) % shape.optimizer_instances == 0)
      << shape.optimizer_instances << " distributed-optimizer instances over DP " << shape.data << " x CP "
      << shape.context;
  return shape.data * shape.context / shape.optimizer_instances;
}

std::vector<std::vector<int>> grid_groups(const GridShape& shape, GridGroup kind) {
  std::vector<std::vector<int>> groups;
  std::vector<bool> placed(static_cast<size_t>(shape.world()), false);
  for (int rank = 0; rank < shape.world(); ++rank) {
    if (placed[static_cast<size_t>(rank)]) continue;
    std::vector<std::pair<int, int>> members;  // (place in group, world rank)
    for (int other = 0; other < shape.world(); ++other) {
      if (is_expert_group(kind)) {
        const ExpertCoordinates mine = expert_coordinates(shape, rank), theirs = expert_coordinates(shape, other);
        if (!same_expert_group(kind, mine, theirs)) continue;
        members.emplace_back(place_in_expert_group(kind, shape, theirs), other);
      } else {
        const GridCoordinates mine = grid_coordinates(shape, rank), theirs = grid_coordinates(shape, other);
        if (!same_group(kind, shape, mine, theirs)) continue;
        members.emplace_back(place_in_group(kind, shape, theirs), other);
      }
      placed[static_cast<size_t>(other)] = true;
    }
    std::sort(members.begin(), members.end());
    std::vector<int> group;
    for (const auto& [place, member] : members) group.push_back(member);
    groups.push_back(std::move(group));
  }
  return groups;
}

std::unique_ptr<ProcessGrid> ProcessGrid::single() {
  return std::make_unique<ProcessGrid>(
      GridShape{}, 0, std::make_unique<SelfCommunicator>("world"), std::make_unique<SelfCommunicator>("tensor-parallel"),
      std::make_unique<SelfCommunicator>("data-parallel"), std::make_unique<SelfCommunicator>("pipeline-parallel"),
      std::make_unique<SelfCommunicator>("embedding"), std::make_unique<SelfCommunicator>("model-parallel"));
}

ProcessGrid::ProcessGrid(GridShape shape, int world_rank, std::unique_ptr<Communicator> world,
                         std::unique_ptr<Communicator> tensor, std::unique_ptr<Communicator> data,
                         std::unique_ptr<Communicator> pipeline, std::unique_ptr<Communicator> embedding,
                         std::unique_ptr<Communicator> model_parallel, std::unique_ptr<Communicator> context,
                         std::unique_ptr<Communicator> data_context,
                         std::unique_ptr<Communicator> optimizer_instance,
                         std::unique_ptr<Communicator> across_optimizer_instances,
                         std::unique_ptr<Communicator> context_inner, std::unique_ptr<Communicator> context_outer)
    : shape_(shape),
      world_rank_(world_rank),
      coordinates_(grid_coordinates(shape, world_rank)),
      world_(std::move(world)),
      tensor_(std::move(tensor)),
      data_(std::move(data)),
      pipeline_(std::move(pipeline)),
      embedding_(std::move(embedding)),
      model_parallel_(std::move(model_parallel)),
      context_(context ? std::move(context) : std::make_unique<SelfCommunicator>("context-parallel")),
      data_context_(std::move(data_context)),
      optimizer_instance_(std::move(optimizer_instance)),
      across_optimizer_instances_(across_optimizer_instances
                                      ? std::move(across_optimizer_instances)
                                      : std::make_unique<SelfCommunicator>("across-optimizer-instances")),
      context_inner_(std::move(context_inner)),
      context_outer_(std::move(context_outer)),
      expert_coordinates_(gpt::expert_coordinates(shape, world_rank)),
      expert_self_(std::make_unique<SelfCommunicator>("expert-model-parallel")) {
  if (shape.expert_layers) check_expert_grid(shape);
  GPT_CHECK_EQ(world_->size(), shape.world()) << "world communicator size";
  GPT_CHECK_EQ(tensor_->size(), shape.tensor);
  GPT_CHECK_EQ(data_->size(), shape.data);
  GPT_CHECK_EQ(pipeline_->size(), shape.pipeline);
  GPT_CHECK_EQ(context_->size(), shape.context);
  GPT_CHECK(data_context_ == nullptr || data_context_->size() == shape.data * shape.context) << "data x context group";
  GPT_CHECK(data_context_ != nullptr || shape.context == 1) << "CP > 1 needs a data x context group";
  const int instance_size = optimizer_instance_size(shape);
  GPT_CHECK_EQ(this->optimizer_instance().size(), instance_size) << "distributed-optimizer instance group";
  GPT_CHECK_EQ(across_optimizer_instances_->size(), shape.optimizer_instances) << "group across optimizer instances";
  GPT_CHECK((context_inner_ != nullptr) == (shape.context_inner > 0) && (context_outer_ != nullptr) == (shape.context_inner > 0))
      << "a2a+p2p's context levels without their groups";
  if (context_inner_) {
    GPT_CHECK_EQ(context_inner_->size(), shape.context_inner) << "context-parallel level 0 (all-to-all)";
    GPT_CHECK_EQ(context_outer_->size(), shape.context / shape.context_inner) << "context-parallel level 1 (ring)";
  }
}

void ProcessGrid::set_expert_groups(ExpertGroups groups) {
  expert_ = std::move(groups);
  if (!shape_.expert_layers) return;
  const int etp = shape_.expert_tensor_size(), ep = shape_.expert_model;
  GPT_CHECK_EQ(expert_tensor().size(), etp) << "expert tensor-parallel group";
  GPT_CHECK_EQ(expert_model().size(), ep) << "expert-model-parallel group";
  GPT_CHECK_EQ(expert_exchange().size(), etp * ep) << "expert tensor x model group";
  GPT_CHECK_EQ(expert_data().size(), shape_.expert_data_size()) << "expert data-parallel group";
  GPT_CHECK_EQ(expert_tensor_model_pipeline().size(), etp * ep * shape_.pipeline) << "expert tp-ep-pp group";
}

std::string ProcessGrid::describe() const {
  std::ostringstream out;
  out << "> process grid: world " << world_size() << " = TP " << shape_.tensor;
  if (shape_.context > 1) out << " x CP " << shape_.context;
  out << " x PP " << shape_.pipeline << " x DP " << shape_.data << " (order " << rank_order_name(shape_.order)
      << ", rank = tp + TP*(" << (shape_.context > 1 ? "cp + CP*(" : "")
      << (shape_.order == RankOrder::kTpCpPpDp ? "pp + PP*dp" : "dp + DP*pp") << (shape_.context > 1 ? "))" : ")")
      << ")\n";
  auto list_groups = [&](const char* name, GridGroup kind) {
    out << ">   " << name << " groups:";
    for (const std::vector<int>& group : grid_groups(shape_, kind)) {
      out << " [";
      for (size_t i = 0; i < group.size(); ++i) out << (i ? "," : "") << group[i];
      out << "]";
    }
    out << "\n";
  };
  list_groups("tensor-parallel", GridGroup::kTensor);
  if (shape_.context > 1) list_groups("context-parallel", GridGroup::kContext);
  list_groups("data-parallel", GridGroup::kData);
  if (shape_.context_inner > 0) {
    list_groups("context-parallel level 0 (a2a)", GridGroup::kContextInner);
    list_groups("context-parallel level 1 (p2p)", GridGroup::kContextOuter);
  }
  if (shape_.context > 1) list_groups("data-context-parallel", GridGroup::kDataContext);
  list_groups("pipeline-parallel", GridGroup::kPipeline);
  list_groups("model-parallel", GridGroup::kModelParallel);
  if (shape_.expert_layers && (shape_.expert_model > 1 || shape_.expert_tensor_size() != shape_.tensor)) {
    out << "> expert grid: ETP " << shape_.expert_tensor_size() << " x EP " << shape_.expert_model << " x EDP "
        << shape_.expert_data_size() << " x PP " << shape_.pipeline << "\n";
    if (shape_.expert_tensor_size() != shape_.tensor) list_groups("expert-tensor-parallel", GridGroup::kExpertTensor);
    list_groups("expert-model-parallel", GridGroup::kExpertModel);
    list_groups("expert-tensor-and-model-parallel", GridGroup::kExpertExchange);
    list_groups("expert-data-parallel", GridGroup::kExpertData);
  }
  if (shape_.optimizer_instances > 1) {
    list_groups("distributed-optimizer instance", GridGroup::kOptimizerInstance);
    list_groups("across distributed-optimizer instances", GridGroup::kAcrossOptimizerInstances);
  }
  std::string text = out.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace gpt
