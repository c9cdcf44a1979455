// The parameter hooks of model/param_observer.h over a real pipeline step: two ranks (PP 2), two
// model chunks each (v 2, one layer per virtual stage, full recompute so that recompute hooks
// appear), four microbatches of the interleaved 1F1B schedule, run by the pipeline executor. Each
// rank records every hook its chunks call and checks the sequence against one written from its
// own instruction list: per forward, every group of the chunk in order (before/after use); per
// backward, the recompute of the layer, then every group in reverse (before/after use, gradients
// ready), with last_of_step exactly on the chunk's last backward of the schedule (microbatch m-1).
// The same for ZB-H1 (PP 2, v 1): a split backward's use hooks at its B, its gradients-ready
// hooks at its W, last_of_step on the last W.
#include <mpi.h>

#include <map>
#include <string>
#include <vector>

#include "core/arena.h"
#include "gtest/gtest.h"
#include "support/tiny_model.h"
#include "model/gpt_model.h"
#include "parallel/comm/mpi_communicator.h"
#include "parallel/comm/self_communicator.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/schedule.h"

namespace gpt {
namespace {

constexpr int kPipeline = 2, kMicrobatches = 4;
constexpr int64_t kBatch = 2;

ModelConfig tiny_config(int layers) {
  ModelConfig c = testing_support::tiny_model(layers);
  c.recompute = {.granularity = RecomputeGranularity::kFull, .method = RecomputeMethod::kUniform, .num_layers = 1};
  return c;
}

// Every hook as a line: "chunk c mb k <hook> <group>".
class Recorder final : public ParamObserver {
 public:
  // The microbatch each chunk's slot holds (set by the stage before it calls the chunk).
  std::map<std::pair<int, int>, int> microbatch_of;
  int chunk = 0;
  std::vector<std::string> lines;

  void before_use(Context&, const ParamGroup& group, ParamUse use, int slot) override {
    add(slot, std::string("before ") + to_string(use), group);
  }
  void after_use(Context&, const ParamGroup& group, ParamUse use, int slot) override {
    add(slot, std::string("after ") + to_string(use), group);
  }
  void gradients_ready(Context&, const ParamGroup& group, int slot, bool last_of_step) override {
    add(slot, last_of_step ? "ready last" : "ready", group);
  }

 private:
  void add(int slot, const std::string& hook, const ParamGroup& group) {
    lines.push_back("chunk " + std::to_string(chunk) + " mb " + std::to_string(microbatch_of.at({chunk, slot})) + " " +
                    hook + " " + group.name);
  }
};

// A chunk as the executor's Stage, with fixed tokens and targets.
class TestStage final : public pipeline::Stage {
 public:
  TestStage(GptModel& model, int chunk, Recorder& recorder, Tensor loss_sum)
      : model_(model), chunk_(chunk), recorder_(recorder), loss_sum_(loss_sum) {}
  DType boundary_dtype() const override { return DType::kFloat32; }
  Shape boundary_shape() const override {
    return Shape({model_.shapes().local_sequence, model_.shapes().batch, model_.shapes().hidden});
  }
  std::optional<Tensor> forward(Context& ctx, int slot, int64_t microbatch,
                                const std::optional<Tensor>& input) override {
    enter(slot, microbatch);
    std::vector<int32_t> ids(static_cast<size_t>(model_.shapes().rows()));
    for (size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<int32_t>((i * 7 + 3 * microbatch) % 37);
    if (model_.layout().has_embedding) model_.load_tokens(ctx, slot, ids);
    if (model_.layout().has_output) model_.load_targets(ctx, slot, ids);
    return model_.forward(ctx, slot, input, {loss_sum_, 0.25f});
  }
  std::optional<Tensor> backward(Context& ctx, int slot, int64_t microbatch, const std::optional<Tensor>& grad_output,
                                 bool last_of_step) override {
    enter(slot, microbatch);
    return model_.backward(ctx, slot, grad_output, last_of_step);
  }
  std::optional<Tensor> backward_input(Context& ctx, int slot, int64_t microbatch,
                                       const std::optional<Tensor>& grad_output, bool last_of_step) override {
    enter(slot, microbatch);
    return model_.backward_input(ctx, slot, grad_output, WeightGradTiming::kDeferred, last_of_step);
  }
  void backward_weight(Context& ctx, int slot, int64_t microbatch) override {
    enter(slot, microbatch);
    model_.backward_weight(ctx, slot);
  }

 private:
  void enter(int slot, int64_t microbatch) {
    recorder_.chunk = chunk_;
    recorder_.microbatch_of[{chunk_, slot}] = static_cast<int>(microbatch);
  }
  GptModel& model_;
  int chunk_;
  Recorder& recorder_;
  Tensor loss_sum_;
};

void check_hooks(pipeline::ScheduleKind kind, int kVirtual) {
  int rank = 0, size = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  MPI_Comm_size(MPI_COMM_WORLD, &size);
  ASSERT_EQ(size, kPipeline) << "run under mpirun -np " << kPipeline;
  const ModelConfig config = tiny_config(kPipeline * kVirtual);
  const std::vector<ParamSpec> all_specs = build_param_specs(config);
  // Chunk c of rank r is virtual stage c p + r, one layer each.
  std::vector<ChunkLayout> layouts;
  std::vector<ParamSpec> specs;
  for (int c = 0; c < kVirtual; ++c) {
    const int stage = c * kPipeline + rank;
    layouts.push_back({.first_layer = stage, .num_layers = 1, .has_embedding = stage == 0,
                       .has_output = stage == kPipeline * kVirtual - 1, .tied_head = true});
    for (ParamSpec& spec : chunk_param_specs(all_specs, layouts.back())) specs.push_back(std::move(spec));
  }
  Context ctx = Context::cpu(1);
  Arena arena(Device::kCpu, "test");
  ParamStore store(std::move(specs), 0, 1, DType::kFloat32, arena);
  store.initialize(3);
  store.zero_grads(ctx);
  SelfCommunicator tp_group("tensor-parallel");
  TensorParallel tp(tp_group, false);
  MpiCommunicator pipeline_group(MPI_COMM_WORLD, "pipeline", 60.0);

  absl::StatusOr<pipeline::Schedule> schedule =
      pipeline::make_schedule(kind, kPipeline, kVirtual, kMicrobatches);
  ASSERT_TRUE(schedule.ok()) << schedule.status();
  const std::vector<pipeline::Step>& steps = schedule->ranks[static_cast<size_t>(rank)];
  const std::vector<int> slots = pipeline::stash_slots(steps, kVirtual);
  const std::vector<int> depths = pipeline::deferral_depths(steps, kVirtual);

  Recorder recorder;
  Tensor loss_sum = arena.allocate_zeroed(DType::kFloat32, {1});
  std::vector<std::unique_ptr<GptModel>> chunks;
  std::vector<std::unique_ptr<TestStage>> stages;
  std::vector<pipeline::Stage*> stage_pointers;
  for (int c = 0; c < kVirtual; ++c) {
    chunks.push_back(std::make_unique<GptModel>(config, store, tp, kBatch, slots[static_cast<size_t>(c)],
                                                layouts[static_cast<size_t>(c)], arena,
                                                depths[static_cast<size_t>(c)]));
    chunks.back()->set_observer(&recorder);
    stages.push_back(std::make_unique<TestStage>(*chunks.back(), c, recorder, loss_sum));
    stage_pointers.push_back(stages.back().get());
  }
  pipeline::Executor executor({rank, kPipeline}, stage_pointers, slots, arena);
  executor.run(ctx, pipeline_group, steps);

  // The expected sequence, from the instruction list. A split backward (Bi) calls the use hooks;
  // its W, later, the gradients-ready hooks, last_of_step on the chunk's last W.
  std::map<int, int> last_backward;
  for (const pipeline::Step& step : steps) {
    for (const pipeline::Instruction& i : step.instructions) {
      if (i.op == pipeline::Op::kBackward || i.op == pipeline::Op::kBackwardWeight) {
        last_backward[i.chunk] = i.microbatch;
      }
    }
  }
  std::vector<std::string> expected;
  for (const pipeline::Step& step : steps) {
    for (const pipeline::Instruction& i : step.instructions) {
      if (!pipeline::is_compute_op(i.op)) continue;
      const ChunkLayout& layout = layouts[static_cast<size_t>(i.chunk)];
      std::vector<std::string> groups;
      if (layout.has_embedding) groups.push_back("embedding");
      groups.push_back("layer " + std::to_string(layout.first_layer));
      if (layout.has_output) groups.push_back("output");
      const std::string prefix = "chunk " + std::to_string(i.chunk) + " mb " + std::to_string(i.microbatch) + " ";
      if (i.op == pipeline::Op::kForward) {
        for (const std::string& g : groups) {
          expected.push_back(prefix + "before forward " + g);
          expected.push_back(prefix + "after forward " + g);
        }
        continue;
      }
      const bool last = last_backward.at(i.chunk) == i.microbatch;
      if (i.op == pipeline::Op::kBackwardWeight) {
        for (auto g = groups.rbegin(); g != groups.rend(); ++g) {
          expected.push_back(prefix + (last ? "ready last " : "ready ") + *g);
        }
        continue;
      }
      for (auto g = groups.rbegin(); g != groups.rend(); ++g) {
        if (g->rfind("layer", 0) == 0) {  // full recompute of the layer right before its backward
          expected.push_back(prefix + "before recompute " + *g);
          expected.push_back(prefix + "after recompute " + *g);
        }
        expected.push_back(prefix + "before backward " + *g);
        expected.push_back(prefix + "after backward " + *g);
        if (i.op == pipeline::Op::kBackward) expected.push_back(prefix + (last ? "ready last " : "ready ") + *g);
      }
    }
  }
  EXPECT_EQ(recorder.lines, expected) << "rank " << rank;
  // Independently of the expectation above: each chunk's gradients become final exactly once per
  // group, on microbatch m - 1 (every schedule runs a chunk's backwards in microbatch order).
  for (int c = 0; c < kVirtual; ++c) {
    int finals = 0;
    for (const std::string& line : recorder.lines) {
      if (line.rfind("chunk " + std::to_string(c) + " ", 0) != 0 || line.find("ready last") == std::string::npos) {
        continue;
      }
      ++finals;
      EXPECT_NE(line.find(" mb " + std::to_string(kMicrobatches - 1) + " "), std::string::npos) << line;
    }
    EXPECT_EQ(finals, static_cast<int>(chunks[static_cast<size_t>(c)]->parameter_groups().size())) << "chunk " << c;
  }
}

TEST(ParamHooks, FollowThePipelineSchedule) { check_hooks(pipeline::ScheduleKind::kInterleaved, 2); }

// ZB-H1 (v 1): rank 1's backwards split into B and a later W; rank 0 (first stage) fuses them.
TEST(ParamHooks, FollowTheZeroBubbleSchedule) { check_hooks(pipeline::ScheduleKind::kZeroBubbleH1, 1); }

}  // namespace
}  // namespace gpt
