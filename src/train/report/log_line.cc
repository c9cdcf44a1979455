#include "train/report/log_line.h"

#include <cmath>
#include <ctime>

#include "absl/strings/str_format.h"

namespace gpt {

std::string format_log_line(const IterationLog& log, const std::string& timestamp, const LogLineOptions& options) {
  std::string line = absl::StrFormat(" [%s]", timestamp);
  line += absl::StrFormat(" iteration %8d/%8d |", log.iteration, log.train_iters);
  line += absl::StrFormat(" consumed samples: %12d |", log.consumed_samples);
  line += absl::StrFormat(" elapsed time per iteration (ms): %.1f |", log.elapsed_ms_per_iteration);
  if (options.throughput) {
    line += absl::StrFormat(" throughput per GPU (TFLOP/s/GPU): %.1f |", log.tflops_per_gpu);
    line += absl::StrFormat(" tokens per GPU (tokens/s/GPU): %.1f |", log.tokens_per_second_per_gpu);
  }
  line += absl::StrFormat(" learning rate: %.6E |", log.learning_rate);
  line += absl::StrFormat(" global batch size: %5d |", log.global_batch_size);
  // Megatron prints a loss only when its average is positive.
  if (log.lm_loss > 0.0 || std::isnan(log.lm_loss)) line += absl::StrFormat(" lm loss: %.6E |", log.lm_loss);
  for (const auto& [name, value] : log.moe_losses) line += absl::StrFormat(" %s: %.6E |", name, value);
  line += absl::StrFormat(" loss scale: %.1f |", log.loss_scale);
  if (log.grad_norm) line += absl::StrFormat(" grad norm: %.3f |", *log.grad_norm);
  if (log.num_zeros_in_grad) line += absl::StrFormat(" num zeros: %d |", *log.num_zeros_in_grad);
  if (log.params_norm) line += absl::StrFormat(" params norm: %.3f |", *log.params_norm);
  line += absl::StrFormat(" number of skipped iterations: %3d |", log.skipped_iterations);
  line += absl::StrFormat(" number of nan iterations: %3d |", log.nan_iterations);
  return line;
}

std::string current_timestamp() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  char buffer[32];
  std::strftime(buffer, sizeof(buffer), "%Y-%m-%d %H:%M:%S", &local);
  return buffer;
}

std::string format_validation_line(const std::string& where, double loss) {
  const double perplexity = std::exp(std::min(20.0, loss));
  return absl::StrFormat(" validation loss at %s | lm loss value: %.6E | lm loss PPL: %.6E | ", where, loss, perplexity);
}

}  // namespace gpt
