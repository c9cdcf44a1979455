// The process grid's groups in both of Megatron's rank orders ("tp-cp-ep-dp-pp", the default, and
// "tp-cp-ep-pp-dp", --use-tp-pp-dp-mapping) against an independent reimplementation of Megatron's
// RankGenerator (megatron/core/parallel_state.py: generate_masked_orthogonal_rank_groups over the
// order's sizes, the group's kinds masked), for several layouts; then, under mpirun -np 8, the MPI
// communicators the grid builds hold exactly those ranks, in that order. The same for the groups of
// --num-distributed-optimizer-instances against Megatron's construction of them, and for the two
// levels of the context group of --hierarchical-context-parallel-sizes (--cp-comm-type a2a+p2p).
#include <mpi.h>

#include <algorithm>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "core/context.h"
#include "gtest/gtest.h"
#include "parallel/mpi_grid.h"

namespace gpt {
namespace {

// Megatron's generate_masked_orthogonal_rank_groups: the world is a mixed-radix number over
// `sizes` (first fastest); a group varies the masked digits (first masked fastest) with the
// unmasked digits fixed, groups numbered by the unmasked digits (first unmasked fastest).
std::vector<std::vector<int>> megatron_groups(const std::vector<int>& sizes, const std::vector<bool>& mask) {
  std::vector<int> stride(sizes.size());
  int world = 1;
  for (size_t i = 0; i < sizes.size(); ++i) {
    stride[i] = world;
    world *= sizes[i];
  }
  std::vector<size_t> masked, unmasked;
  for (size_t i = 0; i < sizes.size(); ++i) (mask[i] ? masked : unmasked).push_back(i);
  int group_size = 1;
  for (size_t i : masked) group_size *= sizes[i];
  // Digit d of `index` over the dimensions `dims`, first fastest, as an offset in the world.
  auto offset = [&](int index, const std::vector<size_t>& dims) {
    int total = 0;
    for (size_t d : dims) {
      total += (index % sizes[d]) * stride[d];
      index /= sizes[d];
    }
    return total;
  };
  std::vector<std::vector<int>> groups;
  for (int g = 0; g < world / group_size; ++g) {
    std::vector<int> group;
    for (int r = 0; r < group_size; ++r) group.push_back(offset(r, masked) + offset(g, unmasked));
    groups.push_back(group);
  }
  return groups;
}

// RankGenerator(tp, ep=1, dp, pp, cp, order).get_ranks(token).
std::vector<std::vector<int>> rank_generator(const GridShape& shape, const std::string& token) {
  const std::vector<std::string> order = shape.order == RankOrder::kTpCpPpDp
                                             ? std::vector<std::string>{"tp", "cp", "ep", "pp", "dp"}
                                             : std::vector<std::string>{"tp", "cp", "ep", "dp", "pp"};
  const std::map<std::string, int> size_of = {
      {"tp", shape.tensor}, {"cp", shape.context}, {"ep", 1}, {"dp", shape.data}, {"pp", shape.pipeline}};
  std::vector<int> sizes;
  std::vector<bool> mask;
  for (const std::string& name : order) {
    sizes.push_back(size_of.at(name));
    mask.push_back(token.find(name) != std::string::npos);
  }
  return megatron_groups(sizes, mask);
}

struct Kind {
  GridGroup group;
  const char* megatron_token;
};
constexpr Kind kKinds[] = {{GridGroup::kTensor, "tp"},      {GridGroup::kContext, "cp"},
                           {GridGroup::kData, "dp"},        {GridGroup::kDataContext, "dp-cp"},
                           {GridGroup::kPipeline, "pp"},    {GridGroup::kModelParallel, "tp-pp"}};

// World 8 in every way TP x CP x PP x DP can make it with CP in {1, 2}, each in both orders.
std::vector<GridShape> layouts_of_eight() {
  std::vector<GridShape> layouts;
  for (int tp : {1, 2, 4, 8}) {
    for (int cp : {1, 2}) {
      for (int pp : {1, 2, 4, 8}) {
        if (8 % (tp * cp * pp) != 0) continue;
        const int dp = 8 / (tp * cp * pp);
        for (RankOrder order : {RankOrder::kTpCpDpPp, RankOrder::kTpCpPpDp}) {
          layouts.push_back(GridShape{.tensor = tp, .pipeline = pp, .data = dp, .context = cp, .order = order});
        }
      }
    }
  }
  return layouts;
}

std::string name_of(const GridShape& s) {
  return "TP " + std::to_string(s.tensor) + " CP " + std::to_string(s.context) + " PP " + std::to_string(s.pipeline) +
         " DP " + std::to_string(s.data) + " order " + rank_order_name(s.order);
}

TEST(RankOrder, GroupsEqualMegatronsRankGenerator) {
  std::vector<GridShape> layouts = layouts_of_eight();
  layouts.push_back({.tensor = 2, .pipeline = 3, .data = 4, .order = RankOrder::kTpCpPpDp});  // the docstring's
  layouts.push_back({.tensor = 2, .pipeline = 3, .data = 4, .context = 1});
  layouts.push_back({.tensor = 3, .pipeline = 2, .data = 5, .context = 2, .order = RankOrder::kTpCpPpDp});
  for (const GridShape& shape : layouts) {
    for (const Kind& kind : kKinds) {
      EXPECT_EQ(grid_groups(shape, kind.group), rank_generator(shape, kind.megatron_token))
          << name_of(shape) << ", group " << kind.megatron_token;
    }
    for (int rank = 0; rank < shape.world(); ++rank) {
      ASSERT_EQ(grid_rank(shape, grid_coordinates(shape, rank)), rank) << name_of(shape);
    }
  }
}

TEST(RankOrder, MegatronsDocstringExample) {
  // parallel_state.py: "if the gpu size is 8 and order is 'tp-pp-dp', size is '2-2-2', the dp_group
  // here is [[0, 4], [1, 5], [2, 6], [3, 7]]".
  const GridShape shape{.tensor = 2, .pipeline = 2, .data = 2, .order = RankOrder::kTpCpPpDp};
  EXPECT_EQ(grid_groups(shape, GridGroup::kData), (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(grid_groups(shape, GridGroup::kPipeline), (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  // The default order on the same sizes: the pipeline slowest.
  const GridShape usual{.tensor = 2, .pipeline = 2, .data = 2};
  EXPECT_EQ(grid_groups(usual, GridGroup::kData), (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
}

// Megatron's partial distributed optimizer (parallel_state.py): instance i is the slice
// [i x size, (i + 1) x size) of each dp-cp group's rank list (_INTRA_PARTIAL_DATA_PARALLEL_GROUP_WITH_CP);
// the group across instances is create_hierarchical_groups' level 1 of [size, N] over each expert
// data-parallel group (RankGenerator with ep 1, cp 1 and dp = DP x CP, token "dp"): einops
// "(l s u) -> (l u) s" with u = size, s = N, l = 1, i.e. the members at the same index of every
// slice. (Megatron asserts that the two data-parallel sizes agree unless the order ends in pp or
// PP = 1; those layouts are left out of the second comparison.)
struct InstanceGroups {
  std::vector<std::vector<int>> instances, across;
};
bool megatron_accepts(const GridShape& shape) {
  return shape.order == RankOrder::kTpCpDpPp || shape.pipeline == 1 || shape.context == 1;
}
InstanceGroups megatron_instance_groups(const GridShape& shape) {
  InstanceGroups result;
  const int n = shape.optimizer_instances, size = shape.data * shape.context / n;
  for (const std::vector<int>& ranks : rank_generator(shape, "dp-cp")) {
    for (int i = 0; i < n; ++i) result.instances.emplace_back(ranks.begin() + i * size, ranks.begin() + (i + 1) * size);
  }
  GridShape expert = shape;
  expert.data = shape.data * shape.context;
  expert.context = 1;
  for (const std::vector<int>& ranks : rank_generator(expert, "dp")) {
    for (int u = 0; u < size; ++u) {
      std::vector<int> group;
      for (int s = 0; s < n; ++s) group.push_back(ranks[static_cast<size_t>(s * size + u)]);
      result.across.push_back(group);
    }
  }
  // grid_groups lists groups in the order of their lowest member.
  std::sort(result.instances.begin(), result.instances.end());
  std::sort(result.across.begin(), result.across.end());
  return result;
}

// Every layout of eight ranks with each instance count that divides its DP x CP.
std::vector<GridShape> layouts_with_instances() {
  std::vector<GridShape> layouts;
  for (GridShape shape : layouts_of_eight()) {
    for (int n = 2; n <= shape.data * shape.context; ++n) {
      if (shape.data * shape.context % n != 0) continue;
      shape.optimizer_instances = n;
      layouts.push_back(shape);
    }
  }
  return layouts;
}

TEST(RankOrder, OptimizerInstancesEqualMegatrons) {
  std::vector<GridShape> layouts = layouts_with_instances();
  layouts.push_back({.tensor = 2, .pipeline = 3, .data = 4, .optimizer_instances = 2});
  layouts.push_back({.tensor = 3, .pipeline = 2, .data = 6, .context = 2, .optimizer_instances = 3});
  for (const GridShape& shape : layouts) {
    const InstanceGroups expected = megatron_instance_groups(shape);
    EXPECT_EQ(grid_groups(shape, GridGroup::kOptimizerInstance), expected.instances)
        << name_of(shape) << ", " << shape.optimizer_instances << " instances";
    if (!megatron_accepts(shape)) continue;
    EXPECT_EQ(grid_groups(shape, GridGroup::kAcrossOptimizerInstances), expected.across)
        << name_of(shape) << ", " << shape.optimizer_instances << " instances";
  }
  // TP 2 x DP 4 in 2 instances (default order: rank = tp + 2 dp): instances of consecutive
  // data-parallel ranks, the group across them strided.
  const GridShape shape{.tensor = 2, .data = 4, .optimizer_instances = 2};
  EXPECT_EQ(grid_groups(shape, GridGroup::kOptimizerInstance),
            (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(grid_groups(shape, GridGroup::kAcrossOptimizerInstances),
            (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  EXPECT_EQ(optimizer_instance_size(shape), 2);
}

// Megatron's create_hierarchical_parallel_groups(rank, ranks, group_size, sizes) over each context
// group's rank list (RankGenerator's "cp"), transcribed: level l's groups take `sizes[l]` members
// at stride `processed` (the product of the earlier levels' sizes) within blocks of `accumulated`.
std::vector<std::vector<std::vector<int>>> megatron_hierarchical_context_groups(const GridShape& shape,
                                                                                const std::vector<int>& sizes) {
  std::vector<std::vector<std::vector<int>>> levels(sizes.size());
  for (const std::vector<int>& ranks : rank_generator(shape, "cp")) {
    const int group_size = static_cast<int>(ranks.size());
    int accumulated = 1, processed = 1;
    for (size_t level = 0; level < sizes.size(); ++level) {
      accumulated *= sizes[level];
      for (int k = 0; k < group_size / accumulated; ++k) {
        for (int j = 0; j < processed; ++j) {
          std::vector<int> group;
          for (int i = 0; i < sizes[level]; ++i) group.push_back(ranks[static_cast<size_t>(j + i * processed + k * accumulated)]);
          levels[level].push_back(group);
        }
      }
      processed *= sizes[level];
    }
  }
  for (auto& groups : levels) std::sort(groups.begin(), groups.end());  // grid_groups' order
  return levels;
}

// Layouts of eight ranks with CP 4 or 8 and every two-level split of it.
std::vector<GridShape> layouts_with_context_levels() {
  std::vector<GridShape> layouts;
  for (int tp : {1, 2}) {
    for (int cp : {4, 8}) {
      if (tp * cp > 8) continue;
      for (int pp : {1, 2}) {
        if (8 % (tp * cp * pp) != 0) continue;
        for (RankOrder order : {RankOrder::kTpCpDpPp, RankOrder::kTpCpPpDp}) {
          for (int inner = 1; inner <= cp; inner *= 2) {
            layouts.push_back(GridShape{.tensor = tp, .pipeline = pp, .data = 8 / (tp * cp * pp), .context = cp,
                                        .order = order, .context_inner = inner});
          }
        }
      }
    }
  }
  return layouts;
}

TEST(RankOrder, ContextLevelsEqualMegatrons) {
  std::vector<GridShape> layouts = layouts_with_context_levels();
  layouts.push_back({.tensor = 3, .pipeline = 2, .data = 2, .context = 6, .context_inner = 3});
  layouts.push_back({.tensor = 2, .pipeline = 1, .data = 2, .context = 6, .order = RankOrder::kTpCpPpDp,
                     .context_inner = 2});
  for (const GridShape& shape : layouts) {
    const auto expected = megatron_hierarchical_context_groups(shape, {shape.context_inner, shape.context / shape.context_inner});
    EXPECT_EQ(grid_groups(shape, GridGroup::kContextInner), expected[0]) << name_of(shape) << ", level 0 of " << shape.context_inner;
    EXPECT_EQ(grid_groups(shape, GridGroup::kContextOuter), expected[1]) << name_of(shape) << ", level 1";
  }
  // As Megatron's docstring draws its first two levels: CP 4 as [2, 2] is [0,1] [2,3] for the
  // all-to-all and [0,2] [1,3] for the ring; with TP 2 the context ranks of one tp are even or odd.
  const GridShape cp4{.context = 4, .context_inner = 2};
  EXPECT_EQ(grid_groups(cp4, GridGroup::kContextInner), (std::vector<std::vector<int>>{{0, 1}, {2, 3}}));
  EXPECT_EQ(grid_groups(cp4, GridGroup::kContextOuter), (std::vector<std::vector<int>>{{0, 2}, {1, 3}}));
  const GridShape tp2_cp4{.tensor = 2, .context = 4, .context_inner = 2};
  EXPECT_EQ(grid_groups(tp2_cp4, GridGroup::kContextInner),
            (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(grid_groups(tp2_cp4, GridGroup::kContextOuter),
            (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
}

// Megatron's expert RankGenerator(tp=ETP, ep=EP, dp=EDP, pp=PP, cp=1, order).get_ranks(token).
std::vector<std::vector<int>> expert_rank_generator(const GridShape& shape, const std::string& token) {
  const std::vector<std::string> order = shape.order == RankOrder::kTpCpPpDp
                                             ? std::vector<std::string>{"tp", "cp", "ep", "pp", "dp"}
                                             : std::vector<std::string>{"tp", "cp", "ep", "dp", "pp"};
  const std::map<std::string, int> size_of = {{"tp", shape.expert_tensor_size()},
                                              {"cp", 1},
                                              {"ep", shape.expert_model},
                                              {"dp", shape.expert_data_size()},
                                              {"pp", shape.pipeline}};
  std::vector<int> sizes;
  std::vector<bool> mask;
  for (const std::string& name : order) {
    sizes.push_back(size_of.at(name));
    // "tp-ep-pp" masks tp, ep and pp; "dp" only dp ("ep" is no part of "dp").
    bool masked = false;
    for (size_t at = 0; at < token.size(); at = token.find('-', at) == std::string::npos ? token.size() : token.find('-', at) + 1) {
      masked |= token.compare(at, name.size(), name) == 0;
    }
    mask.push_back(masked);
  }
  return megatron_groups(sizes, mask);
}

// Every dense layout of `world` ranks (CP 1 or 2) with every EP x ETP its world holds, in both
// orders, that Megatron accepts (with the tp-pp-dp order and PP > 1 the expert data-parallel size
// must be the data-parallel size).
std::vector<GridShape> expert_layouts(int world) {
  std::vector<GridShape> layouts;
  for (int tp = 1; tp <= world; tp *= 2) {
    for (int cp : {1, 2}) {
      for (int pp = 1; pp <= world; pp *= 2) {
        if (world % (tp * cp * pp) != 0) continue;
        for (int ep = 1; ep <= world; ep *= 2) {
          for (int etp = 1; etp <= world; etp *= 2) {
            if (world % (etp * ep * pp) != 0) continue;
            for (RankOrder order : {RankOrder::kTpCpDpPp, RankOrder::kTpCpPpDp}) {
              const GridShape shape{.tensor = tp, .pipeline = pp, .data = world / (tp * cp * pp), .context = cp,
                                    .order = order, .expert_model = ep, .expert_tensor = etp, .expert_layers = true};
              if (order == RankOrder::kTpCpPpDp && pp > 1 && shape.expert_data_size() != shape.data) continue;
              layouts.push_back(shape);
            }
          }
        }
      }
    }
  }
  return layouts;
}

std::string expert_name_of(const GridShape& s) {
  return name_of(s) + " EP " + std::to_string(s.expert_model) + " ETP " + std::to_string(s.expert_tensor_size());
}

struct ExpertKind {
  GridGroup group;
  const char* megatron_token;
};
constexpr ExpertKind kExpertKinds[] = {{GridGroup::kExpertTensor, "tp"},
                                       {GridGroup::kExpertModel, "ep"},
                                       {GridGroup::kExpertExchange, "tp-ep"},
                                       {GridGroup::kExpertData, "dp"},
                                       {GridGroup::kExpertTensorModelPipeline, "tp-ep-pp"}};

TEST(RankOrder, ExpertGroupsEqualMegatronsExpertRankGenerator) {
  int checked = 0;
  for (int world : {8, 16}) {
    for (const GridShape& shape : expert_layouts(world)) {
      check_expert_grid(shape);  // both grids put every rank on the same pipeline stage
      for (const ExpertKind& kind : kExpertKinds) {
        EXPECT_EQ(grid_groups(shape, kind.group), expert_rank_generator(shape, kind.megatron_token))
            << expert_name_of(shape) << ", expert group " << kind.megatron_token;
      }
      // Megatron's pipeline groups of the expert generator are the dense ones.
      EXPECT_EQ(expert_rank_generator(shape, "pp"), rank_generator(shape, "pp")) << expert_name_of(shape);
      // Where the grid shares the dense communicators, the groups are the same.
      if (shape.expert_groups_are_dense()) {
        EXPECT_EQ(grid_groups(shape, GridGroup::kExpertExchange), grid_groups(shape, GridGroup::kTensor));
        EXPECT_EQ(grid_groups(shape, GridGroup::kExpertData), grid_groups(shape, GridGroup::kDataContext));
        EXPECT_EQ(grid_groups(shape, GridGroup::kExpertTensorModelPipeline),
                  grid_groups(shape, GridGroup::kModelParallel));
      }
      ++checked;
    }
  }
  EXPECT_GT(checked, 300);
  // TP 2 x DP 4 with EP 2: the dispatcher's group is two neighbouring data-parallel replicas' TP pairs.
  const GridShape shape{.tensor = 2, .data = 4, .expert_model = 2, .expert_layers = true};
  EXPECT_EQ(grid_groups(shape, GridGroup::kExpertModel), (std::vector<std::vector<int>>{{0, 2}, {1, 3}, {4, 6}, {5, 7}}));
  EXPECT_EQ(grid_groups(shape, GridGroup::kExpertExchange), (std::vector<std::vector<int>>{{0, 1, 2, 3}, {4, 5, 6, 7}}));
  EXPECT_EQ(grid_groups(shape, GridGroup::kExpertData), (std::vector<std::vector<int>>{{0, 4}, {1, 5}, {2, 6}, {3, 7}}));
  // Parallel folding: TP 2 with ETP 1 x EP 2 puts the experts over the tensor-parallel pair.
  const GridShape folded{.tensor = 2, .data = 4, .expert_model = 2, .expert_tensor = 1, .expert_layers = true};
  EXPECT_EQ(grid_groups(folded, GridGroup::kExpertModel), grid_groups(folded, GridGroup::kTensor));
  EXPECT_TRUE(folded.expert_groups_are_dense());
}

// Under mpirun -np 8: each communicator of each layout holds the ranks grid_groups lists, in order.
TEST(RankOrder, MpiCommunicatorsHoldTheGroups) {
  int world_size = 1, world_rank = 0;
  MPI_Comm_size(MPI_COMM_WORLD, &world_size);
  MPI_Comm_rank(MPI_COMM_WORLD, &world_rank);
  ASSERT_EQ(world_size, 8) << "run with mpirun -np 8";
  Context ctx = Context::cpu(1);
  std::vector<GridShape> layouts = layouts_of_eight();
  for (const GridShape& shape : layouts_with_instances()) layouts.push_back(shape);
  for (const GridShape& shape : layouts_with_context_levels()) layouts.push_back(shape);
  for (const GridShape& shape : expert_layouts(8)) layouts.push_back(shape);
  for (const GridShape& shape : layouts) {
    std::unique_ptr<ProcessGrid> grid = build_mpi_grid(shape, /*timeout_seconds=*/120.0);
    ASSERT_EQ(grid->world_rank(), world_rank);
    std::vector<std::pair<GridGroup, Communicator*>> groups = {{GridGroup::kTensor, &grid->tensor()},
                                                               {GridGroup::kData, &grid->data()},
                                                               {GridGroup::kPipeline, &grid->pipeline()},
                                                               {GridGroup::kModelParallel, &grid->model_parallel()}};
    if (shape.context > 1) {
      groups.push_back({GridGroup::kContext, &grid->context()});
      groups.push_back({GridGroup::kDataContext, &grid->data_context()});
    }
    if (shape.context_inner > 0) {
      groups.push_back({GridGroup::kContextInner, &grid->context_inner()});
      groups.push_back({GridGroup::kContextOuter, &grid->context_outer()});
    }
    if (shape.optimizer_instances > 1) {
      groups.push_back({GridGroup::kOptimizerInstance, &grid->optimizer_instance()});
      groups.push_back({GridGroup::kAcrossOptimizerInstances, &grid->across_optimizer_instances()});
    }
    if (shape.expert_layers) {  // a dense model's expert accessors are its dense groups (nothing uses them)
      groups.push_back({GridGroup::kExpertTensor, &grid->expert_tensor()});
      groups.push_back({GridGroup::kExpertModel, &grid->expert_model()});
      groups.push_back({GridGroup::kExpertExchange, &grid->expert_exchange()});
      groups.push_back({GridGroup::kExpertData, &grid->expert_data()});
      groups.push_back({GridGroup::kExpertTensorModelPipeline, &grid->expert_tensor_model_pipeline()});
    }
    for (const auto& [kind, communicator] : groups) {
      std::vector<int> members(static_cast<size_t>(communicator->size()));
      int me = world_rank;
      communicator->all_gather(ctx, Tensor(members.data(), DType::kInt32, Shape({communicator->size()}), Device::kCpu),
                               Tensor(&me, DType::kInt32, Shape({1}), Device::kCpu));
      std::vector<int> expected;
      for (const std::vector<int>& group : grid_groups(shape, kind)) {
        for (int member : group) {
          if (member == world_rank) expected = group;
        }
      }
      EXPECT_EQ(members, expected) << name_of(shape) << ", " << communicator->name() << " group of rank " << world_rank;
    }
    // The embedding group: the first and last stage of this rank's pipeline group.
    const GridCoordinates c = grid->coordinates();
    if (c.pipeline == 0 || c.pipeline == shape.pipeline - 1) {
      std::vector<int> members(static_cast<size_t>(grid->embedding().size()));
      int me = world_rank;
      grid->embedding().all_gather(ctx, Tensor(members.data(), DType::kInt32, Shape({grid->embedding().size()}),
                                               Device::kCpu),
                                   Tensor(&me, DType::kInt32, Shape({1}), Device::kCpu));
      GridCoordinates first = c, last = c;
      first.pipeline = 0;
      last.pipeline = shape.pipeline - 1;
      std::vector<int> expected = {grid_rank(shape, first)};
      if (shape.pipeline > 1) expected.push_back(grid_rank(shape, last));
      EXPECT_EQ(members, expected) << name_of(shape) << ", embedding group";
    }
  }
}

}  // namespace
}  // namespace gpt
