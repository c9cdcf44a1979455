#include "parallel/grid_split.h"

namespace gpt {
namespace {

// The expert grid's groups that are not dense groups already (ProcessGrid's accessors fall back
// to those): colors enumerate the expert coordinates outside the group, keys its own, etp fastest.
ProcessGrid::ExpertGroups split_expert_groups(const GridShape& shape, int world_rank, const GroupSplit& split) {
  const ExpertCoordinates c = expert_coordinates(shape, world_rank);
  const int etp = shape.expert_tensor_size(), ep = shape.expert_model, edp = shape.expert_data_size();
  ProcessGrid::ExpertGroups groups;
  if (etp != shape.tensor) {
    groups.tensor = split(c.model + ep * (c.data + edp * c.pipeline), c.tensor, "expert-tensor-parallel");
  }
  if (ep > 1) groups.model = split(c.tensor + etp * (c.data + edp * c.pipeline), c.model, "expert-model-parallel");
  if (!shape.expert_groups_are_dense()) {
    groups.exchange = split(c.data + edp * c.pipeline, c.tensor + etp * c.model, "expert-tensor-and-model-parallel");
    groups.data = split(c.tensor + etp * (c.model + ep * c.pipeline), c.data, "expert-data-parallel");
    groups.tensor_model_pipeline =
        split(c.data, c.tensor + etp * (c.model + ep * c.pipeline), "expert-tensor-model-pipeline-parallel");
  }
  return groups;
}

}  // namespace

std::unique_ptr<ProcessGrid> build_split_grid(const GridShape& shape, int world_rank,
                                              std::unique_ptr<Communicator> world, const GroupSplit& split) {
  const GridCoordinates c = grid_coordinates(shape, world_rank);
  const bool embedding_member = c.pipeline == 0 || c.pipeline == shape.pipeline - 1;
  // Colors enumerate the coordinates outside the group; keys order the members by the group's own.
  const int tc = c.tensor + shape.tensor * c.context;  // (tp, cp): a pipeline or embedding column with dp
  auto tensor = split(c.context + shape.context * (c.data + shape.data * c.pipeline), c.tensor, "tensor-parallel");
  auto data = split(tc + shape.tensor * shape.context * c.pipeline, c.data, "data-parallel");
  auto pipeline = split(tc + shape.tensor * shape.context * c.data, c.pipeline, "pipeline-parallel");
  auto embedding = split(embedding_member ? tc + shape.tensor * shape.context * c.data : kNotMember, c.pipeline,
                         "embedding");
  auto model_parallel = split(c.data + shape.data * c.context, c.tensor + shape.tensor * c.pipeline, "model-parallel");
  std::unique_ptr<Communicator> context, data_context;
  if (shape.context > 1) {
    context = split(c.tensor + shape.tensor * (c.data + shape.data * c.pipeline), c.context, "context-parallel");
    data_context = split(c.tensor + shape.tensor * c.pipeline, c.context + shape.context * c.data,
                         "data-context-parallel");
  }
  std::unique_ptr<Communicator> optimizer_instance, across_optimizer_instances;
  if (shape.optimizer_instances > 1) {
    // Within a (tp, pp) position, members of the data x context group by place cp + CP * dp: the
    // instance is place / size, the place within it place % size.
    const int size = optimizer_instance_size(shape), place = c.context + shape.context * c.data;
    const int position = c.tensor + shape.tensor * c.pipeline;
    optimizer_instance = split(place / size + shape.optimizer_instances * position, place % size,
                               "distributed-optimizer-instance");
    across_optimizer_instances = split(place % size + size * position, place / size, "across-optimizer-instances");
  }
  std::unique_ptr<Communicator> context_inner, context_outer;
  if (shape.context_inner > 0) {
    // a2a+p2p's levels of the context group (same tp, dp, pp): level 0 holds the context ranks of
    // one cp / A, ordered by cp % A; level 1 those of one cp % A, ordered by cp / A.
    const int inner = shape.context_inner, outer = shape.context / inner;
    const int position = c.tensor + shape.tensor * (c.data + shape.data * c.pipeline);
    context_inner = split(c.context / inner + outer * position, c.context % inner, "context-parallel-a2a");
    context_outer = split(c.context % inner + inner * position, c.context / inner, "context-parallel-p2p");
  }
  ProcessGrid::ExpertGroups expert;
  if (shape.expert_layers) expert = split_expert_groups(shape, world_rank, split);  // checked by ProcessGrid
  auto grid = std::make_unique<ProcessGrid>(shape, world_rank, std::move(world), std::move(tensor), std::move(data),
                                            std::move(pipeline), std::move(embedding), std::move(model_parallel),
                                            std::move(context), std::move(data_context), std::move(optimizer_instance),
                                            std::move(across_optimizer_instances), std::move(context_inner),
                                            std::move(context_outer));
  grid->set_expert_groups(std::move(expert));
  return grid;
}

}  // namespace gpt
