#include "parallel/process_grid.h"

#include <sstream>

#include "core/check.h"
#include "parallel/comm/self_communicator.h"

namespace gpt {

int grid_rank(const GridShape& shape, const GridCoordinates& c) {
  return c.tensor + shape.tensor * (c.context + shape.context * (c.data + shape.data * c.pipeline));
}

GridCoordinates grid_coordinates(const GridShape& shape, int rank) {
  GridCoordinates c;
  c.tensor = rank % shape.tensor;
  c.context = (rank / shape.tensor) % shape.context;
  c.data = (rank / (shape.tensor * shape.context)) % shape.data;
  c.pipeline = rank / (shape.tensor * shape.context * shape.data);
  return c;
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
                         std::unique_ptr<Communicator> data_context)
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
      data_context_(std::move(data_context)) {
  GPT_CHECK_EQ(world_->size(), shape.world()) << "world communicator size";
  GPT_CHECK_EQ(tensor_->size(), shape.tensor);
  GPT_CHECK_EQ(data_->size(), shape.data);
  GPT_CHECK_EQ(pipeline_->size(), shape.pipeline);
  GPT_CHECK_EQ(context_->size(), shape.context);
  GPT_CHECK(data_context_ == nullptr || data_context_->size() == shape.data * shape.context) << "data x context group";
  GPT_CHECK(data_context_ != nullptr || shape.context == 1) << "CP > 1 needs a data x context group";
}

std::string ProcessGrid::describe() const {
  std::ostringstream out;
  out << "> process grid: world " << world_size() << " = TP " << shape_.tensor;
  if (shape_.context > 1) out << " x CP " << shape_.context;
  out << " x PP " << shape_.pipeline << " x DP " << shape_.data
      << (shape_.context > 1 ? " (rank = tp + TP*(cp + CP*(dp + DP*pp)))\n" : " (rank = tp + TP*(dp + DP*pp))\n");
  auto list_groups = [&](const char* name, auto member_of) {
    out << ">   " << name << " groups:";
    std::vector<std::vector<int>> groups;
    std::vector<int> seen(static_cast<size_t>(world_size()), -1);
    for (int rank = 0; rank < world_size(); ++rank) {
      if (seen[rank] >= 0) continue;
      std::vector<int> group;
      for (int other = 0; other < world_size(); ++other) {
        if (member_of(grid_coordinates(shape_, rank), grid_coordinates(shape_, other))) {
          group.push_back(other);
          seen[other] = 1;
        }
      }
      groups.push_back(group);
    }
    for (const auto& group : groups) {
      out << " [";
      for (size_t i = 0; i < group.size(); ++i) out << (i ? "," : "") << group[i];
      out << "]";
    }
    out << "\n";
  };
  list_groups("tensor-parallel", [](GridCoordinates a, GridCoordinates b) {
    return a.context == b.context && a.data == b.data && a.pipeline == b.pipeline;
  });
  if (shape_.context > 1) {
    list_groups("context-parallel", [](GridCoordinates a, GridCoordinates b) {
      return a.tensor == b.tensor && a.data == b.data && a.pipeline == b.pipeline;
    });
  }
  list_groups("data-parallel", [](GridCoordinates a, GridCoordinates b) {
    return a.tensor == b.tensor && a.context == b.context && a.pipeline == b.pipeline;
  });
  if (shape_.context > 1) {
    list_groups("data-context-parallel",
                [](GridCoordinates a, GridCoordinates b) { return a.tensor == b.tensor && a.pipeline == b.pipeline; });
  }
  list_groups("pipeline-parallel", [](GridCoordinates a, GridCoordinates b) {
    return a.tensor == b.tensor && a.context == b.context && a.data == b.data;
  });
  list_groups("model-parallel",
              [](GridCoordinates a, GridCoordinates b) { return a.data == b.data && a.context == b.context; });
  std::string text = out.str();
  if (!text.empty() && text.back() == '\n') text.pop_back();
  return text;
}

}  // namespace gpt
