// Megatron's per-iteration training log line, character for character (training_log in
// megatron/training/training.py), so that existing log parsers work:
//
//  [2025-02-20 11:18:37] iteration        2/     250 | consumed samples:            8 | elapsed time per
//  iteration (ms): 370.3 | throughput per GPU (TFLOP/s/GPU): 0.6 | learning rate: 1.000000E-05 | global
//  batch size:     4 | lm loss: 6.158036E+00 | loss scale: 1.0 | grad norm: 110.614 | number of skipped
//  iterations:   0 | number of nan iterations:   0 |
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace gpt {

struct IterationLog {
  int64_t iteration = 0;
  int64_t train_iters = 0;
  int64_t consumed_samples = 0;
  double elapsed_ms_per_iteration = 0.0;
  double tflops_per_gpu = 0.0;
  double learning_rate = 0.0;
  int64_t global_batch_size = 0;
  double lm_loss = 0.0;        // average over the interval's iterations
  double loss_scale = 1.0;
  std::optional<double> grad_norm = 0.0;  // none after a step the loss scaler skipped (Megatron's None)
  int64_t skipped_iterations = 0;
  int64_t nan_iterations = 0;
  double tokens_per_second_per_gpu = 0.0;
  std::optional<int64_t> num_zeros_in_grad;  // --log-num-zeros-in-grad
  std::optional<double> params_norm;         // --log-params-norm
  // Mixture of experts: Megatron's load-balancing losses, printed after the LM loss as its other
  // losses are (" load_balancing_loss: 1.000000E+00 |"), interval averages.
  std::vector<std::pair<std::string, double>> moe_losses;
};

struct LogLineOptions {
  // --log-throughput: Megatron prints the TFLOP/s field only then. This program adds the tokens
  // per second per GPU right after it (a field of its own, so Megatron's fields keep their text).
  bool throughput = false;
};

// Without a trailing newline; `timestamp` is "YYYY-mm-dd HH:MM:SS".
std::string format_log_line(const IterationLog& log, const std::string& timestamp, const LogLineOptions& options);
std::string current_timestamp();

// Megatron's evaluation line, `where` being "iteration 100" during training and "iteration 100 on
// validation set" / "... on test set" at the end:
//  " validation loss at iteration 100 | lm loss value: 5.100000E+00 | lm loss PPL: 1.640219E+02 | "
std::string format_validation_line(const std::string& where, double loss);

}  // namespace gpt
