// The executor drives the passes the collective program (parallel/pipeline/collective_program.h)
// assumes: run on each pipeline rank alone (a pipeline group whose exchanges move nothing), a
// recording Stage sees the passes in the order the program's expert exchanges are listed, and the
// pass the executor marks last_of_step (the chunk's gradients final) is the one where the program
// starts the chunk's bucket reductions: two independent derivations of "the chunk's last backward".
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "core/arena.h"
#include "core/context.h"
#include "gtest/gtest.h"
#include "parallel/comm/communicator.h"
#include "parallel/pipeline/collective_program.h"
#include "parallel/pipeline/executor.h"

namespace gpt::pipeline {
namespace {

// A pipeline group of `size` ranks whose exchanges complete at once without moving data: each
// rank's executor runs alone (the order of its own passes does not depend on its peers' data).
class DetachedPipeline final : public Communicator {
 public:
  DetachedPipeline(int rank, int size) : rank_(rank), size_(size) {}
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  const std::string& name() const override { return name_; }
  CollectiveHandle start_all_reduce(Context&, const Tensor&, ReduceOp) override { return {}; }
  CollectiveHandle start_reduce_scatter(Context&, const Tensor&, const Tensor&, ReduceOp) override { return {}; }
  CollectiveHandle start_all_gather(Context&, const Tensor&, const Tensor&) override { return {}; }
  CollectiveHandle start_broadcast(Context&, const Tensor&, int) override { return {}; }
  CollectiveHandle start_exchange(Context&, std::span<const PeerTransfer>) override { return {}; }
  void barrier(Context&) override {}

 private:
  int rank_, size_;
  std::string name_ = "pipeline-parallel";
};

struct Pass {
  Op op;
  int chunk, microbatch;
  bool last_of_step;
};

class RecordingStage final : public Stage {
 public:
  RecordingStage(int chunk, bool first, bool last, Arena& arena, std::vector<Pass>& log)
      : chunk_(chunk), first_(first), last_(last), output_(arena.allocate(DType::kFloat32, Shape{1})), log_(log) {}
  DType boundary_dtype() const override { return DType::kFloat32; }
  Shape boundary_shape() const override { return Shape{1}; }
  std::optional<Tensor> forward(Context&, int, int64_t microbatch, const std::optional<Tensor>&) override {
    log_.push_back({Op::kForward, chunk_, static_cast<int>(microbatch), false});
    return last_ ? std::nullopt : std::optional<Tensor>(output_);
  }
  std::optional<Tensor> backward(Context&, int, int64_t microbatch, const std::optional<Tensor>&, bool last) override {
    log_.push_back({Op::kBackward, chunk_, static_cast<int>(microbatch), last});
    return first_ ? std::nullopt : std::optional<Tensor>(output_);
  }
  std::optional<Tensor> backward_input(Context&, int, int64_t microbatch, const std::optional<Tensor>&,
                                       bool last) override {
    log_.push_back({Op::kBackwardInput, chunk_, static_cast<int>(microbatch), last});
    return first_ ? std::nullopt : std::optional<Tensor>(output_);
  }
  void backward_weight(Context&, int, int64_t microbatch) override {
    log_.push_back({Op::kBackwardWeight, chunk_, static_cast<int>(microbatch), false});
  }

 private:
  int chunk_;
  bool first_, last_;
  Tensor output_;
  std::vector<Pass>& log_;
};

TEST(CollectiveExecutor, TheExecutorDrivesThePassesTheProgramLists) {
  Context ctx = Context::cpu(1);
  int ranks_checked = 0;
  for (const auto& [kind, v] : {std::pair{ScheduleKind::kAllForwardAllBackward, 1},
                                std::pair{ScheduleKind::kOneFOneB, 1}, std::pair{ScheduleKind::kZeroBubbleH1, 1},
                                std::pair{ScheduleKind::kInterleaved, 2}, std::pair{ScheduleKind::kZeroBubbleV, 2}}) {
    for (int p : {2, 4}) {
      for (int m : {p, 2 * p}) {
        absl::StatusOr<Schedule> schedule = make_schedule(kind, p, v, m);
        ASSERT_TRUE(schedule.ok()) << schedule.status();
        // DP 2 x PP p, EP 2: the exchange spans the data-parallel pair of each stage.
        const GridLayout grid{1, 1, 2, p, 2, 0, false};
        absl::StatusOr<WorldProgram> program =
            collective_program(grid, *schedule, even_model_layout(2 * p * v, p * v, {true}));
        ASSERT_TRUE(program.ok()) << program.status();
        for (int q = 0; q < p; ++q) {
          SCOPED_TRACE(testing::Message() << to_string(kind) << " p=" << p << " m=" << m << " pipeline rank " << q);
          const RankStages where{q, p, schedule->placement};
          Arena arena(Device::kCpu, "test");
          std::vector<Pass> log;
          std::vector<RecordingStage> stages;
          stages.reserve(static_cast<size_t>(v));
          std::vector<Stage*> chunks;
          for (int c = 0; c < v; ++c) {
            stages.emplace_back(c, where.stage(c) == 0, where.stage(c) == p * v - 1, arena, log);
            chunks.push_back(&stages.back());
          }
          const auto& steps = schedule->ranks[static_cast<size_t>(q)];
          Executor executor(where, chunks, stash_slots(steps, v, where), arena);
          DetachedPipeline pipeline(q, p);
          executor.run(ctx, pipeline, steps);

          // The program's calls of this stage's first world rank (dp 0).
          const std::vector<Event>& events =
              program->ranks[static_cast<size_t>(program->column_rank[static_cast<size_t>(q)][0])];
          // 1. The passes that run expert exchanges (F and the input gradient), in the program's
          // order: each pass dispatches for the chunk's two MoE layers, ascending in a forward and
          // descending in an input gradient.
          std::vector<std::tuple<int, int, bool>> program_passes, executor_passes;
          std::vector<const Call*> dispatches;
          for (const Event& e : events) {
            if (e.kind == Event::Kind::kCall && e.call.op == CallOp::kExpertDispatch) dispatches.push_back(&e.call);
          }
          ASSERT_EQ(dispatches.size() % 2, 0u);
          for (size_t d = 0; d < dispatches.size(); d += 2) {
            const Call& a = *dispatches[d];
            const Call& b = *dispatches[d + 1];
            ASSERT_EQ(std::pair(a.chunk, a.microbatch), std::pair(b.chunk, b.microbatch));
            program_passes.push_back({a.chunk, a.microbatch, a.layer < b.layer});
          }
          for (const Pass& pass : log) {
            if (pass.op != Op::kBackwardWeight)
              executor_passes.push_back({pass.chunk, pass.microbatch, pass.op == Op::kForward});
          }
          EXPECT_EQ(program_passes, executor_passes);
          // 2. Where the chunk's gradients are final: the executor's last_of_step pass (with a split
          // backward, the W of that microbatch) and the program's dense bucket reductions.
          std::set<std::pair<int, int>> flagged, reduced;
          for (const Pass& pass : log) {
            if (pass.last_of_step) flagged.insert({pass.chunk, pass.microbatch});
          }
          for (const Event& e : events) {
            if (e.kind == Event::Kind::kCall && e.call.op == CallOp::kGradientReduce)
              reduced.insert({e.call.chunk, e.call.microbatch});
          }
          EXPECT_EQ(flagged, reduced);
          EXPECT_EQ(static_cast<int>(flagged.size()), v);
          ++ranks_checked;
        }
      }
    }
  }
  EXPECT_EQ(ranks_checked, 5 * 2 * (2 + 4));  // kinds x microbatch counts x the ranks of p = 2 and 4
}

}  // namespace
}  // namespace gpt::pipeline
