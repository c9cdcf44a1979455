// Where the learning-rate schedule stands: the samples of the updates taken so far (Megatron's
// OptimizerParamScheduler.num_steps, which train_step advances by the iteration's global batch
// size after each successful update). With a constant batch that is updates x --global-batch-size;
// with a ramp-up or step schedule (train/batch_size_schedule.h) it is the sum of the batches, so
// checkpoints keep it as the record "opt_param_scheduler/num_steps".
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <string>

#include "train/checkpoint_records.h"

namespace gpt {

class SchedulerPosition final : public CheckpointRecords {
 public:
  // `before_records`: the position of a checkpoint saved before the record existed (its batch was
  // constant: updates taken x --global-batch-size), asked when such a checkpoint is loaded.
  explicit SchedulerPosition(std::function<int64_t()> before_records) : before_records_(std::move(before_records)) {}

  int64_t samples() const { return samples_; }
  void advance(int64_t batch_samples) { samples_ += batch_samples; }
  void set(int64_t samples) { samples_ = samples; }

  void save_records(std::map<std::string, std::string>& records) const override;
  absl::Status load_records(const std::map<std::string, std::string>& records) override;

 private:
  std::function<int64_t()> before_records_;
  int64_t samples_ = 0;
};

}  // namespace gpt
