// The parts of a training run that the code around the training loop reads, saves and restores:
// the checkpointer (train/checkpointing.h), the replica and --test-mode checks
// (train/resilience/replica_check.h, qk_layernorm_check.h) and the training samples
// (train/report/training_sample.h). Each takes the parts it needs, which the trainer
// (train/trainer.h) hands out, instead of the trainer itself.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "core/context.h"
#include "model/config.h"
#include "model/param_store.h"
#include "optim/adamw.h"
#include "optim/lr_schedule.h"
#include "train/checkpoint_records.h"

namespace gpt {

// Where the data stands: samples consumed from the train and validation splits. Setting it (after
// a restart) makes the next samples exactly those an uninterrupted run would read.
struct DataPosition {
  int64_t consumed_train_samples = 0;
  int64_t consumed_valid_samples = 0;
};

// Where a run stands, and what loading a checkpoint sets of it: the iteration and data position,
// the learning-rate schedule of the updates from now on.
class TrainingProgress {
 public:
  virtual int64_t iteration() const = 0;
  virtual DataPosition data_position() const = 0;
  virtual void set_data_position(const DataPosition& position, int64_t iteration) = 0;
  // The schedule (in samples) and weight decay of the updates from now on: a resumed run's
  // (train/scheduler_resume.h).
  virtual void set_scheduler(const LrScheduleConfig& schedule, const LrScheduleConfig& decoupled_schedule,
                             double weight_decay) = 0;
  // Whether the next iteration's global batch size differs from the last one's (Megatron then
  // saves a checkpoint first).
  virtual bool batch_size_changes_next() const = 0;

 protected:
  ~TrainingProgress() = default;
};

// This rank's parameters as code outside the training step reads them.
struct RankParameters {
  Context& ctx;                // copies them to the host
  ParamStore& params;          // this rank's chunks' parameters, one store
  const ModelConfig& config;   // the model they belong to
  int num_chunks = 1;          // this rank's model chunks (virtual stages)
  // Waits for parameter all-gathers still in flight (--overlap-param-gather leaves them to the next
  // forward): call before reading the values.
  std::function<void()> settle;
  // The model's persistent tensors that are not parameters (model/param_registry.h's
  // model_buffer_names: the MoE layers' expert bias), this rank's chunks', as checkpoint pieces;
  // unset: none.
  std::function<std::vector<ShardedTensor>()> buffers;
};

// What a checkpoint saves and restores: the parameters, the optimizer's state, the run's progress
// and the records of the parts that keep non-tensor state (in registration order).
struct CheckpointedState {
  RankParameters parameters;
  AdamW& optimizer;
  TrainingProgress& progress;
  const std::vector<CheckpointRecords*>& records;
};

}  // namespace gpt
