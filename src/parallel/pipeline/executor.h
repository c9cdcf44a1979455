// Runs this rank's part of a pipeline schedule (schedule.h): compute steps call the rank's Stages,
// transfer steps post their sends and receives over the pipeline communicator as one batch and
// wait for it. The executor keeps, per model chunk, the stash slots of the microbatches in flight
// (a slot is taken when a microbatch first reaches the chunk and freed after its backward — with a
// split backward, after its W — or after its forward when the steps have no backward) and the
// receive buffers of each slot.
//
// The executor itself issues only the pipeline transfers; a compute step's collectives (a MoE
// layer's expert exchanges, the tensor / context calls, the bucket reductions started at the pass
// marked last_of_step) are issued by its Stage, and collective_program.h lists them step by step
// for every rank of the world, so that collective_check.h proves their order before a run
// (pipeline_collective_executor_test: the passes and the last_of_step marks this class drives are
// the ones the program lists).
#pragma once

#include <map>
#include <optional>
#include <set>
#include <span>
#include <utility>
#include <vector>

#include "core/arena.h"
#include "parallel/comm/communicator.h"
#include "parallel/pipeline/schedule.h"
#include "parallel/pipeline/stage.h"

namespace gpt::pipeline {

// Where this rank's chunks sit among the virtual stages (schedule.h's placements).
struct RankStages {
  int pipeline_rank = 0;
  int pipeline_size = 1;
  Placement placement = Placement::kLoop;
  int stage(int chunk) const { return virtual_stage(placement, pipeline_size, pipeline_rank, chunk); }
  int stages(int chunks) const { return pipeline_size * chunks; }
  // The V's turn (kV, rank p - 1): chunk 0's activation goes to chunk 1 on this rank, and chunk
  // 1's input gradient back to chunk 0, with no transfer.
  bool has_turn() const { return placement == Placement::kV && pipeline_rank == pipeline_size - 1; }
};

// The stash slots each of `chunks` model chunks needs to run `steps` (the most microbatches alive
// in that chunk at once), at least 1. At the V's turn chunk 1's microbatch takes its slot when
// chunk 0's forward hands it the activation.
std::vector<int> stash_slots(std::span<const Step> steps, int chunks, const RankStages& where = {});
// The weight-gradient passes each chunk must be able to defer (the most microbatches between
// their kBackwardInput and kBackwardWeight at once): the lease depth to build it with; 0 where the
// steps run only fused backwards.
std::vector<int> deferral_depths(std::span<const Step> steps, int chunks);

class Executor {
 public:
  // `chunks[c]` is this rank's model chunk c (virtual stage where.stage(c): c * pipeline_size +
  // pipeline_rank in Megatron's placement), built with at least slots[c] stash slots. Receive
  // buffers come from `arena`.
  Executor(const RankStages& where, std::vector<Stage*> chunks, std::vector<int> slots, Arena& arena);

  // What the constructor takes from its arena: per chunk and slot, a receive buffer for the
  // activation (all but the first virtual stage) and one for its gradient (all but the last), each
  // of `boundary` bytes' worth of the boundary tensor; nothing without pipeline parallelism. The
  // V's turn hands its tensors over through the same buffers.
  static int64_t buffer_bytes(const RankStages& where, std::span<const int> slots, DType dtype, const Shape& boundary);

  // Runs `steps` (this rank's list) to the end. `pipeline` is the pipeline-parallel group (its rank
  // r is pipeline stage r). Every microbatch taken is released by the end.
  void run(Context& ctx, Communicator& pipeline, std::span<const Step> steps);

  // With recording on, run() keeps the [start, end] of each compute step, in seconds from the start
  // of the run, in the steps' order (the device waited for after each step, so the times are the
  // work's, not its launch's): the measured per-rank timeline of the last run recorded.
  void set_recording(bool on) { recording_ = on; }
  const std::vector<std::pair<double, double>>& timeline() const { return timeline_; }

 private:
  using Key = std::pair<int, int>;  // (chunk, microbatch)
  int acquire(int chunk, int microbatch);
  int slot_of(int chunk, int microbatch) const;
  void release(int chunk, int microbatch);
  bool first_virtual_stage(int chunk) const { return where_.stage(chunk) == 0; }
  bool last_virtual_stage(int chunk) const {
    return where_.stage(chunk) == where_.stages(static_cast<int>(chunks_.size())) - 1;
  }
  // Chunk 0 at the V's turn: its activation goes to chunk 1 on this rank.
  bool hands_over(int chunk) const { return chunk == 0 && where_.has_turn(); }
  void transfer(Context& ctx, Communicator& pipeline, const Step& step);
  void compute(Context& ctx, const Instruction& step);  // one compute step's instruction

  RankStages where_;
  int rank_, size_;
  std::vector<Stage*> chunks_;
  std::vector<int> slots_;
  std::vector<std::vector<Tensor>> activations_, gradients_;  // [chunk][slot] receive buffers
  std::vector<std::vector<int>> free_slots_;                  // [chunk]
  std::map<Key, int> taken_;                                  // microbatch in flight -> slot
  std::map<Key, Tensor> outputs_;          // forward results waiting to be sent
  std::map<Key, Tensor> input_gradients_;  // backward results waiting to be sent
  std::set<Key> has_backward_;              // of the steps being run
  std::map<int, int> last_backward_;        // chunk -> the microbatch of its last backward (or W) in the steps
  bool recording_ = false;
  std::vector<std::pair<double, double>> timeline_;  // per compute step of the last run, seconds
};

}  // namespace gpt::pipeline
