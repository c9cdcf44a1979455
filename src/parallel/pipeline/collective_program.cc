#include "parallel/pipeline/collective_program.h"

#include <algorithm>
#include <map>
#include <set>
#include <tuple>
#include <utility>

#include "absl/strings/str_cat.h"

namespace gpt::pipeline {
namespace {

struct Coordinates {
  int tp, cp, dp, pp;     // dense grid
  int etp, ep, edp, epp;  // expert grid (epp: its pipeline stage)
};

Coordinates coordinates(const GridLayout& g, int rank) {
  Coordinates c{};
  int rest = rank;
  c.tp = rest % g.tensor, rest /= g.tensor;
  c.cp = rest % g.context, rest /= g.context;
  if (g.tp_pp_dp) {
    c.pp = rest % g.pipeline, c.dp = rest / g.pipeline;
  } else {
    c.dp = rest % g.data, c.pp = rest / g.data;
  }
  if (g.expert_model == 1 && g.etp() == g.tensor) {
    // The one-rank MoE (EP 1, ETP = TP): the exchange is the tensor group and expert data the data
    // x context group, in every order (with --use-tp-pp-dp-mapping and CP > 1 the expert
    // RankGenerator's formula would move ranks across stages, which Megatron refuses even for a
    // dense model; this program runs that layout).
    c.etp = c.tp, c.ep = 0, c.edp = c.cp + g.context * c.dp, c.epp = c.pp;
    return c;
  }
  rest = rank;
  c.etp = rest % g.etp(), rest /= g.etp();
  c.ep = rest % g.expert_model, rest /= g.expert_model;
  if (g.tp_pp_dp) {
    c.epp = rest % g.pipeline, c.edp = rest / g.pipeline;
  } else {
    c.edp = rest % g.expert_data(), c.epp = rest / g.expert_data();
  }
  return c;
}

constexpr int kKinds = 6;

absl::Status check_sizes(const GridLayout& g, const Schedule& schedule, const ModelLayout& model) {
  if (g.tensor < 1 || g.context < 1 || g.data < 1 || g.pipeline < 1 || g.expert_model < 1 || g.expert_tensor < 0) {
    return absl::InvalidArgumentError(absl::StrCat("collective order: sizes must be positive (TP ", g.tensor, ", CP ",
                                                   g.context, ", DP ", g.data, ", PP ", g.pipeline, ", EP ",
                                                   g.expert_model, ", ETP ", g.expert_tensor, ")"));
  }
  if (g.world() % (g.etp() * g.expert_model * g.pipeline) != 0) {
    return absl::InvalidArgumentError(absl::StrCat("collective order: ETP ", g.etp(), " x EP ", g.expert_model,
                                                   " x PP ", g.pipeline, " does not divide the world of ", g.world()));
  }
  if (schedule.pipeline_size != g.pipeline || static_cast<int>(schedule.ranks.size()) != g.pipeline) {
    return absl::InvalidArgumentError(absl::StrCat("collective order: a schedule for ", schedule.pipeline_size,
                                                   " pipeline ranks on a grid of PP ", g.pipeline));
  }
  if (static_cast<int>(model.stage_moe.size()) != schedule.pipeline_size * schedule.virtual_size) {
    return absl::InvalidArgumentError(absl::StrCat("collective order: ", model.stage_moe.size(), " stage layouts for ",
                                                   schedule.pipeline_size, " x ", schedule.virtual_size,
                                                   " virtual stages"));
  }
  return absl::OkStatus();
}

// The groups of every kind: each rank's key (which group) and place (its order in the group).
void build_groups(const GridLayout& g, const Schedule& schedule, bool experts, WorldProgram& program) {
  const int world = g.world();
  const int first = stage_location(schedule.placement, g.pipeline, 0).rank;
  const int last = stage_location(schedule.placement, g.pipeline, g.pipeline * schedule.virtual_size - 1).rank;
  std::map<std::tuple<int, int, int, int>, std::vector<std::pair<int, int>>> found;  // (kind, key...) -> (place, rank)
  for (int r = 0; r < world; ++r) {
    const Coordinates c = coordinates(g, r);
    const int column = c.tp + g.tensor * (c.cp + g.context * c.dp);
    found[{0, c.cp, c.dp, c.pp}].push_back({c.tp, r});
    found[{1, c.tp, c.dp, c.pp}].push_back({c.cp, r});
    found[{2, c.tp, c.pp, 0}].push_back({c.cp + g.context * c.dp, r});
    if (experts) {
      found[{3, c.edp, c.epp, 0}].push_back({c.etp + g.etp() * c.ep, r});
      found[{4, c.etp, c.ep, c.epp}].push_back({c.edp, r});
    }
    if (first != last && (c.pp == first || c.pp == last)) found[{5, column, 0, 0}].push_back({c.pp, r});
  }
  for (auto& [key, members] : found) {
    if (members.size() < 2) continue;
    std::sort(members.begin(), members.end());
    WorldProgram::Group group{static_cast<GroupKind>(std::get<0>(key)), {}};
    for (const auto& [place, rank] : members) group.members.push_back(rank);
    program.groups.push_back(std::move(group));
  }
  // Kind by kind, groups in the order of their lowest member (as process_grid lists them).
  std::sort(program.groups.begin(), program.groups.end(),
            [](const WorldProgram::Group& a, const WorldProgram::Group& b) {
              return std::pair{a.kind, *std::min_element(a.members.begin(), a.members.end())} <
                     std::pair{b.kind, *std::min_element(b.members.begin(), b.members.end())};
            });
  program.group_of.assign(static_cast<size_t>(world), std::vector<int>(kKinds, -1));
  for (size_t g = 0; g < program.groups.size(); ++g) {
    for (int rank : program.groups[g].members) {
      program.group_of[static_cast<size_t>(rank)][static_cast<size_t>(program.groups[g].kind)] = static_cast<int>(g);
    }
  }
}

// Expands one pipeline rank's steps into the calls of `rank` (one world rank of that stage).
class Expander {
 public:
  Expander(const WorldProgram& program, const Schedule& schedule, const ModelLayout& model, int rank)
      : program_(program), schedule_(schedule), model_(model), rank_(rank) {
    for (const std::vector<bool>& stage : model.stage_moe) {
      first_layer_.push_back(num_layers_);
      num_layers_ += static_cast<int>(stage.size());
    }
  }

  std::vector<Event> run(const std::vector<Step>& steps) {
    std::map<int, int> last_backward;  // chunk -> microbatch of its last fused backward or W
    bool training = false;
    for (const Step& step : steps) {
      const Instruction& i = step.instructions.front();
      if (i.op == Op::kBackward || i.op == Op::kBackwardWeight) last_backward[i.chunk] = i.microbatch;
      training = training || is_backward_op(i.op);
    }
    training_ = training;
    for (const Step& step : steps) {
      const Instruction& i = step.instructions.front();
      if (!is_compute_op(i.op)) {
        events_.push_back({Event::Kind::kTransfers, {}, step.instructions});
        continue;
      }
      const bool final = last_backward.count(i.chunk) > 0 && last_backward[i.chunk] == i.microbatch;
      if (i.op == Op::kForward) forward(i);
      if (i.op == Op::kBackward || i.op == Op::kBackwardInput || i.op == Op::kBackwardWeight) backward(i, final);
    }
    if (!training) return std::move(events_);
    if (model_.reduction == GradientReduction::kAfterBackward) {
      for (int c = 0; c < schedule_.virtual_size; ++c) {
        each_group_in_reverse(c, [&](int layer, bool moe, bool last) { reduce(-1, c, layer, moe, last); });
      }
    }
    if (started_) events_.push_back({Event::Kind::kWaitReductions, {}, {}});
    if (model_.tied_embedding) call(GroupKind::kEmbedding, CallOp::kEmbeddingSum, -1, -1, -1);
    if (model_.updated_shards == UpdatedShards::kAfterStep) {
      for (int c = 0; c < schedule_.virtual_size; ++c)
        each_group_in_order(c, [&](int layer, bool moe) { gather_shards(-1, c, layer, moe); });
    }
    return std::move(events_);
  }

 private:
  int stage(int chunk) const { return virtual_stage(schedule_.placement, schedule_.pipeline_size, pipeline(), chunk); }
  int pipeline() const { return program_.pipeline_rank[static_cast<size_t>(rank_)]; }
  bool first_stage(int chunk) const { return stage(chunk) == 0; }
  bool last_stage(int chunk) const { return stage(chunk) == schedule_.pipeline_size * schedule_.virtual_size - 1; }
  const std::vector<bool>& layers(int chunk) const { return model_.stage_moe[static_cast<size_t>(stage(chunk))]; }

  void call(GroupKind kind, CallOp op, int microbatch, int chunk, int layer, bool expert = false,
            bool blocking = true) {
    if (program_.group_of[static_cast<size_t>(rank_)][static_cast<size_t>(kind)] < 0) return;  // a group of one
    events_.push_back({Event::Kind::kCall, Call{kind, op, microbatch, chunk, layer, expert, blocking}, {}});
    if (!blocking) started_ = true;
  }

  // One layer's calls in forward order (reversed for its input gradient).
  std::vector<std::pair<GroupKind, CallOp>> layer_calls(bool moe) const {
    std::vector<std::pair<GroupKind, CallOp>> calls = {{GroupKind::kContext, CallOp::kContextAttention},
                                                       {GroupKind::kTensor, CallOp::kTensorAttention}};
    if (!moe) {
      calls.push_back({GroupKind::kTensor, CallOp::kTensorMlp});
      return calls;
    }
    calls.push_back({GroupKind::kTensor, CallOp::kTensorRouter});
    if (model_.dispatcher == Dispatcher::kAllToAll)
      calls.push_back({GroupKind::kExpertExchange, CallOp::kExpertCounts});
    calls.push_back({GroupKind::kExpertExchange, CallOp::kExpertDispatch});
    calls.push_back({GroupKind::kExpertExchange, CallOp::kExpertCombine});
    return calls;
  }

  // The group's parameters (or the distributed optimizer's updated shards of them) gathered, the
  // expert ones over expert data.
  void gather_shards(int microbatch, int chunk, int layer, bool moe) {
    call(GroupKind::kDataContext, CallOp::kParameterGather, microbatch, chunk, layer);
    if (moe) call(GroupKind::kExpertData, CallOp::kParameterGather, microbatch, chunk, layer, true);
  }
  // Before a use: every use with ZeRO-3, the chunk's first forward of the step with the updated
  // shards gathered there (--overlap-param-gather).
  void gather(int microbatch, int chunk, int layer, bool moe, bool first_forward = false) {
    if (model_.gather_parameters || (first_forward && model_.updated_shards == UpdatedShards::kInFirstForward)) {
      gather_shards(microbatch, chunk, layer, moe);
    }
  }

  // Calls `f(layer, moe)` for the chunk's parameter groups in forward order.
  template <typename F>
  void each_group_in_order(int chunk, F&& f) const {
    const std::vector<bool>& moe = layers(chunk);
    if (first_stage(chunk)) f(-1, false);
    for (size_t l = 0; l < moe.size(); ++l) {
      f(first_layer_[static_cast<size_t>(stage(chunk))] + static_cast<int>(l), static_cast<bool>(moe[l]));
    }
    if (last_stage(chunk)) f(num_layers_, false);
  }

  void forward(const Instruction& i) {
    // Evaluation reads the parameters the last step's gathers left (settled before it).
    const bool first_forward = forwarded_.insert(i.chunk).second && training_;
    each_group_in_order(i.chunk, [&](int layer, bool moe) {
      gather(i.microbatch, i.chunk, layer, moe, first_forward);
      if (layer < 0 || layer == num_layers_) return;
      for (const auto& [kind, op] : layer_calls(moe)) call(kind, op, i.microbatch, i.chunk, layer);
    });
  }

  // Calls `f(layer, moe, last)` for the chunk's parameter groups in backward order: the output
  // layer (num_layers_), the layers in reverse, the embedding (-1); `last` for the chunk's last.
  template <typename F>
  void each_group_in_reverse(int chunk, F&& f) const {
    std::vector<std::pair<int, bool>> groups;
    const std::vector<bool>& moe = layers(chunk);
    const int first = first_layer_[static_cast<size_t>(stage(chunk))];
    if (last_stage(chunk)) groups.push_back({num_layers_, false});
    for (size_t l = moe.size(); l-- > 0;) groups.push_back({first + static_cast<int>(l), static_cast<bool>(moe[l])});
    if (first_stage(chunk)) groups.push_back({-1, false});
    for (size_t g = 0; g < groups.size(); ++g) f(groups[g].first, groups[g].second, g + 1 == groups.size());
  }

  void backward(const Instruction& i, bool final) {
    const bool input = i.op != Op::kBackwardWeight, weight = i.op != Op::kBackwardInput;
    each_group_in_reverse(i.chunk, [&](int layer, bool moe, bool last) {
      if (input) gather(i.microbatch, i.chunk, layer, moe);
      if (input && layer >= 0 && layer < num_layers_) {
        std::vector<std::pair<GroupKind, CallOp>> calls = layer_calls(moe);
        for (auto c = calls.rbegin(); c != calls.rend(); ++c) call(c->first, c->second, i.microbatch, i.chunk, layer);
      }
      if (weight) gradients_ready(i.microbatch, i.chunk, layer, moe, final, last);
    });
  }

  void gradients_ready(int microbatch, int chunk, int layer, bool moe, bool final, bool last) {
    const GradientReduction mode = model_.reduction;
    if (mode == GradientReduction::kAfterBackward || (mode == GradientReduction::kOverlapped && !final)) return;
    reduce(microbatch, chunk, layer, moe, last);
  }

  // The TP sum of the group's SP-replicated gradients, then its buckets' reductions started; with
  // one bucket per chunk (Megatron's DDP past the first pipeline rank) the chunk's buckets start
  // after its last group (`last`), labelled with layer -2.
  void reduce(int microbatch, int chunk, int layer, bool moe, bool last) {
    if (layer >= 0) call(GroupKind::kTensor, CallOp::kTensorGradSum, microbatch, chunk, layer);
    if (model_.chunk_buckets_after_first_rank && pipeline() > 0) {
      if (!last) return;
      const std::vector<bool>& stage_moe = layers(chunk);
      moe = std::find(stage_moe.begin(), stage_moe.end(), true) != stage_moe.end();
      layer = -2;
    }
    call(GroupKind::kDataContext, CallOp::kGradientReduce, microbatch, chunk, layer, false, false);
    if (moe) call(GroupKind::kExpertData, CallOp::kGradientReduce, microbatch, chunk, layer, true, false);
  }

  const WorldProgram& program_;
  const Schedule& schedule_;
  const ModelLayout& model_;
  const int rank_;
  std::vector<int> first_layer_;  // [virtual stage]
  int num_layers_ = 0;
  bool started_ = false;
  bool training_ = false;
  std::set<int> forwarded_;  // chunks whose first forward of the step has run
  std::vector<Event> events_;
};

}  // namespace

std::string group_name(GroupKind kind, const GridLayout& grid) {
  switch (kind) {
    case GroupKind::kTensor:
      return "tensor-parallel";
    case GroupKind::kContext:
      return "context-parallel";
    case GroupKind::kDataContext:
      return grid.context > 1 ? "data-context-parallel" : "data-parallel";
    case GroupKind::kExpertExchange:
      return "expert-tensor-and-model-parallel";
    case GroupKind::kExpertData:
      return "expert-data-parallel";
    case GroupKind::kEmbedding:
      return "embedding";
  }
  return "?";
}

const char* to_string(CallOp op) {
  switch (op) {
    case CallOp::kContextAttention:
      return "context attention";
    case CallOp::kTensorAttention:
      return "tensor attention";
    case CallOp::kTensorMlp:
      return "tensor mlp";
    case CallOp::kTensorRouter:
      return "tensor router";
    case CallOp::kExpertCounts:
      return "expert counts";
    case CallOp::kExpertDispatch:
      return "expert dispatch";
    case CallOp::kExpertCombine:
      return "expert combine";
    case CallOp::kTensorGradSum:
      return "tensor grad-sum";
    case CallOp::kGradientReduce:
      return "gradient reduce";
    case CallOp::kEmbeddingSum:
      return "embedding sum";
    case CallOp::kParameterGather:
      return "parameter gather";
  }
  return "?";
}

std::string label(const Call& call) {
  std::string text = to_string(call.op);
  if (call.op == CallOp::kGradientReduce || call.op == CallOp::kParameterGather) {
    absl::StrAppend(&text, call.expert ? " (expert bucket)" : " (dense bucket)");
  }
  if (call.microbatch >= 0) absl::StrAppend(&text, " mb", call.microbatch);
  if (call.chunk >= 0) absl::StrAppend(&text, " c", call.chunk);
  if (call.op != CallOp::kEmbeddingSum) {
    absl::StrAppend(&text, call.layer == -2 ? " chunk"
                           : call.layer < 0 ? " embedding"
                                            : absl::StrCat(" L", call.layer));
  }
  return text;
}

std::string to_string(const Call& call, const GridLayout& grid) {
  return absl::StrCat(label(call), " on ", group_name(call.group, grid));
}

ModelLayout even_model_layout(int num_layers, int stages, const std::vector<bool>& moe_pattern) {
  ModelLayout model;
  const int per_stage = stages > 0 ? num_layers / stages : 0;
  for (int s = 0; s < stages; ++s) {
    std::vector<bool> layers;
    for (int l = 0; l < per_stage; ++l) {
      const int layer = s * per_stage + l;
      layers.push_back(!moe_pattern.empty() && moe_pattern[static_cast<size_t>(layer) % moe_pattern.size()]);
    }
    model.stage_moe.push_back(std::move(layers));
  }
  return model;
}

absl::StatusOr<WorldProgram> collective_program(const GridLayout& grid, const Schedule& schedule,
                                                const ModelLayout& model) {
  if (absl::Status status = check_sizes(grid, schedule, model); !status.ok()) return status;
  WorldProgram program;
  program.grid = grid;
  const int world = grid.world();
  const int columns = world / grid.pipeline;
  program.column_rank.assign(static_cast<size_t>(grid.pipeline), std::vector<int>(static_cast<size_t>(columns), -1));
  // A dense model has no expert groups (Megatron builds its expert grid, and refuses a misaligned
  // one, for dense models too; this program's dense grid runs without it).
  bool experts = false;
  for (const std::vector<bool>& stage : model.stage_moe)
    experts = experts || std::find(stage.begin(), stage.end(), true) != stage.end();
  for (int r = 0; r < world; ++r) {
    const Coordinates c = coordinates(grid, r);
    if (experts && c.pp != c.epp) {
      // Megatron's initialize_model_parallel: "Pipeline parallel groups are expected to be the
      // same for Non-Expert and Expert part".
      return absl::InvalidArgumentError(absl::StrCat(
          "collective order: the expert grid (ETP ", grid.etp(), " x EP ", grid.expert_model, ") puts world rank ", r,
          " on pipeline stage ", c.epp, " and the dense grid (TP ", grid.tensor, " x CP ", grid.context, ") on stage ",
          c.pp, ": with --use-tp-pp-dp-mapping and PP > 1, ETP x EP must equal TP x CP"));
    }
    const int column = c.tp + grid.tensor * (c.cp + grid.context * c.dp);
    program.pipeline_rank.push_back(c.pp);
    program.column_of.push_back(column);
    program.column_rank[static_cast<size_t>(c.pp)][static_cast<size_t>(column)] = r;
  }
  build_groups(grid, schedule, experts, program);
  for (int r = 0; r < world; ++r) {
    Expander expander(program, schedule, model, r);
    program.ranks.push_back(
        expander.run(schedule.ranks[static_cast<size_t>(program.pipeline_rank[static_cast<size_t>(r)])]));
  }
  return program;
}

}  // namespace gpt::pipeline
