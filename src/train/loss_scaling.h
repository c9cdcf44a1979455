// The trainer's loss scaling (--fp16, or --loss-scale with --fp16 / --bf16): Megatron's grad scaler
// (optim/loss_scaler.h) with what the run keeps around it — the factor the loss gradient is
// multiplied by before backward, the unscale-and-check of the main gradients before clipping, the
// count of updates skipped for overflow (Megatron's learning-rate scheduler advances only on
// successful updates) — and its checkpoint records.
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>

#include "optim/loss_scaler.h"
#include "train/args/arguments.h"
#include "train/checkpoint_records.h"

namespace gpt {

class LossScaling final : public CheckpointRecords {
 public:
  // Null when the arguments ask for no loss scaling (FP32, or BF16 without --loss-scale).
  static std::unique_ptr<LossScaling> from_arguments(const Arguments& args);
  explicit LossScaling(const LossScalerConfig& config) : scaler_(config) {}

  float scale() const { return scaler_.scale(); }
  const LossScaler& scaler() const { return scaler_; }
  // Updates skipped because of a non-finite gradient since the run began (across restarts).
  int64_t skipped_updates() const { return skipped_updates_; }

  // After the gradients are reduced: unscale this rank's main gradients in `owned`, check them
  // over `groups` and update the scaler (collective over the groups). True: skip this update.
  bool unscale_and_check(Context& ctx, const ParamStore& params, std::span<const Range> owned,
                         const Tensor& count_scratch, const Tensor& float_scratch,
                         std::span<Communicator* const> groups);

  // Records "loss_scaler/scale" (FP32, exact in 9 significant digits), "loss_scaler/growth_tracker",
  // "loss_scaler/hysteresis_tracker" and "loss_scaler/skipped_updates".
  void save_records(std::map<std::string, std::string>& records) const override;
  // A checkpoint without them (saved without loss scaling) leaves the initial state, as Megatron
  // does with a checkpoint that has no grad scaler; a malformed one is an error naming the key.
  absl::Status load_records(const std::map<std::string, std::string>& records) override;

 private:
  LossScaler scaler_;
  int64_t skipped_updates_ = 0;
};

}  // namespace gpt
