// --tensorboard-dir: what Megatron-LM (core_v0.8.0's training_log and evaluate_and_print_results)
// writes to TensorBoard, under its tags, written by the logging rank:
//   every --tensorboard-log-interval iterations: learning-rate (unless
//     --no-log-learnig-rate-to-tensorboard), batch-size (--log-batch-size-to-tensorboard),
//     lm loss (this iteration's), loss-scale (unless --no-log-loss-scale-to-tensorboard),
//     world-size (--log-world-size-to-tensorboard), grad-norm, num-zeros
//     (--log-num-zeros-in-grad), params-norm (--log-params-norm), each also "<tag> vs samples"
//     against the consumed samples; mem-reserved-bytes, mem-allocated-bytes, mem-allocated-count
//     (--log-memory-to-tensorboard);
//   at each log line, with --log-timers-to-tensorboard: iteration-time (seconds), throughput
//     (with --log-throughput) and "<timer>-time" per phase timer (the slowest rank's ms per
//     iteration, as Megatron's timers.write; needs --timing-log-level >= 1 for the phases);
//   every iteration with MoE: load_balancing_loss, seq_load_balancing_loss, z_loss (those in use)
//     and with --moe-per-layer-logging moe/<name>_layer_<i> per layer (Megatron's MoE tracker);
//   at each evaluation: "lm loss validation" and "lm loss validation vs samples", with
//     --log-validation-ppl-to-tensorboard also "... ppl".
// Megatron writes the timers every TensorBoard interval; here they are per log interval, where
// they are measured. Megatron also writes the end-of-training test loss under the validation tag
// (at the same step as the validation loss); here only the validation split is written there.
#pragma once

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "absl/status/statusor.h"
#include "train/args/arguments.h"
#include "train/report/metrics_file.h"
#include "train/report/tensorboard/event_file_writer.h"

namespace gpt {

struct IterationScalars {
  int64_t iteration = 0;
  int64_t consumed_samples = 0;
  double learning_rate = 0.0;
  int64_t batch_size = 0;
  double loss = 0.0;  // this iteration's mean token loss (skipped when not finite)
  double loss_scale = 1.0;
  int64_t world_size = 1;
  std::optional<double> grad_norm = 0.0;  // none after a step the loss scaler skipped
  std::optional<int64_t> num_zeros_in_grad;
  std::optional<double> params_norm;
  int64_t allocated_bytes = 0;   // the arena's allocations
  int64_t reserved_bytes = 0;    // device memory in use (the arena's blocks on the CPU)
  int64_t allocation_count = 0;  // arenas (allocated once, at start-up)
};

class TensorBoardLog {
 public:
  // Opens the event file in --tensorboard-dir.
  static absl::StatusOr<std::unique_ptr<TensorBoardLog>> open(const Arguments& args);

  // Writes the iteration's scalars when the iteration is a multiple of --tensorboard-log-interval.
  void iteration(const IterationScalars& scalars);
  void log_line(int64_t iteration, double seconds_per_iteration, double tflops_per_gpu,
                const std::vector<PhaseTiming>& timers);
  void validation(int64_t iteration, int64_t consumed_samples, double loss);
  // Mixture of experts, every iteration (Megatron's track_moe_metrics): the losses under their bare
  // names ("load_balancing_loss", ...) and, with --moe-per-layer-logging, "moe/<name>_layer_<i>".
  void moe(int64_t iteration, const std::vector<std::pair<std::string, double>>& losses,
           const std::vector<std::pair<std::string, double>>& layer_losses);
  void flush() { writer_->flush(); }
  const std::string& path() const { return writer_->path(); }

 private:
  TensorBoardLog(const Arguments& args, std::unique_ptr<tensorboard::EventFileWriter> writer)
      : args_(args), writer_(std::move(writer)) {}
  // "<tag>" at the iteration and "<tag> vs samples" at the consumed samples.
  void both(const std::string& tag, double value, int64_t iteration, int64_t samples);

  const Arguments& args_;
  std::unique_ptr<tensorboard::EventFileWriter> writer_;
};

}  // namespace gpt
