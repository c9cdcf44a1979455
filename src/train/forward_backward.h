// Megatron's forward_backward_func: one global batch's microbatches through this rank's model
// chunks, in the order of a pipeline schedule (parallel/pipeline): 1F1B, interleaved 1F1B with
// virtual stages, ZB-H1 (split backward), or forward only for evaluation. Without pipeline parallelism the schedule is
// simply the forward and backward of each microbatch in turn. Which samples and where the loss
// goes come from the MicrobatchFeed the chunks were built with.
#pragma once

#include <memory>
#include <vector>

#include "core/arena.h"
#include "model/gpt_model.h"
#include "parallel/comm/communicator.h"
#include "parallel/pipeline/executor.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/process_grid.h"
#include "train/args/arguments.h"
#include "train/model_stage.h"

namespace gpt {

enum class Pass { kTrain, kEvaluate };

// This rank's part of the model: pipeline stage r holds chunks c = 0..v-1, chunk c being virtual
// stage c * p + r of p * v equal layer ranges (Megatron's interleaving), or with ZB-V's V
// placement (v = 2) stages r and 2p - 1 - r: rank 0 then holds the embedding and the loss.
struct PipelineLayout {
  int pipeline_size = 1;
  int pipeline_rank = 0;
  int virtual_size = 1;
  int64_t microbatches = 1;
  int microbatch_group = 0;  // the interleaved schedule's microbatch group size; 0: p (Megatron's default)
  pipeline::ScheduleKind schedule = pipeline::ScheduleKind::kOneFOneB;  // the training schedule
  pipeline::Placement placement = pipeline::Placement::kLoop;          // the schedule's
  std::vector<ChunkLayout> chunks;

  pipeline::RankStages stages() const { return {pipeline_rank, pipeline_size, placement}; }
  bool holds_embedding() const;  // the first virtual stage is one of this rank's chunks
  bool holds_output() const;     // the last one (the loss) is
};
// From validated arguments: pipeline_layout (train/configs.h).
// The parameters of this rank's chunks, each name once; of the routed experts only those of the
// rank's expert-parallel share (its local experts).
std::vector<ParamSpec> rank_param_specs(const std::vector<ParamSpec>& all, const PipelineLayout& layout,
                                        ExpertShare experts = {});

class ForwardBackward {
 public:
  // Builds this rank's training and evaluation schedules, both of layout.microbatches. A run whose
  // batch size changes (a ramp-up or step schedule) names every number of training microbatches it
  // may use in `train_microbatches`: the stash slots and lease depths cover each one's schedule.
  explicit ForwardBackward(const PipelineLayout& layout, const std::vector<int64_t>& train_microbatches = {});

  // Megatron rebuilds its schedule when the number of microbatches changes: the training schedule
  // of `microbatches` from the next pass on (one of the constructor's counts).
  void set_train_microbatches(int64_t microbatches);
  int64_t train_microbatches() const { return train_microbatches_; }

  // The stash slots chunk c must be built with (enough for both schedules).
  const std::vector<int>& stash_slots() const { return slots_; }
  // The lease depth chunk c must be built with (GptModel's deferral_depth): how many of its
  // weight-gradient passes the training schedule defers at once; 0 without a split backward.
  const std::vector<int>& deferral_depths() const { return depths_; }
  // Hands over the chunks, built with stash_slots(); the executor's receive buffers come from
  // `arena`. Call before the arena is frozen.
  void attach(std::vector<pipeline::Stage*> chunks, Arena& arena);

  // Runs the pass over the pipeline group.
  void run(Context& ctx, Communicator& pipeline, Pass pass);

  const pipeline::Schedule& schedule(Pass pass) const { return pass == Pass::kTrain ? train_ : evaluate_; }

  // Training passes keep this rank's measured timeline (pipeline::Executor::timeline: [start, end]
  // seconds of each compute step of the last training pass), waiting for the device at each step.
  void record_timeline(bool on) { recording_ = on; }
  const std::vector<std::pair<double, double>>& timeline() const;

 private:
  pipeline::Schedule training_schedule(int64_t microbatches) const;

  PipelineLayout layout_;
  int64_t train_microbatches_ = 0;
  pipeline::Schedule train_, evaluate_;
  std::vector<int> slots_, depths_;
  std::unique_ptr<pipeline::Executor> executor_;
  bool recording_ = false;
};

}  // namespace gpt
