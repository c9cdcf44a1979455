#include "train/report/tensorboard_log.h"

#include <algorithm>
#include <cmath>

#include "core/status.h"

namespace gpt {

absl::StatusOr<std::unique_ptr<TensorBoardLog>> TensorBoardLog::open(const Arguments& args) {
  GPT_ASSIGN_OR_RETURN(std::unique_ptr<tensorboard::EventFileWriter> writer,
                       tensorboard::EventFileWriter::open(args.tensorboard_dir));
  return std::unique_ptr<TensorBoardLog>(new TensorBoardLog(args, std::move(writer)));
}

void TensorBoardLog::both(const std::string& tag, double value, int64_t iteration, int64_t samples) {
  writer_->add_scalar(tag, value, iteration);
  writer_->add_scalar(tag + " vs samples", value, samples);
}

void TensorBoardLog::iteration(const IterationScalars& s) {
  if (s.iteration % args_.tensorboard_log_interval != 0) return;
  const int64_t it = s.iteration, samples = s.consumed_samples;
  if (!args_.no_log_learning_rate_to_tensorboard) both("learning-rate", s.learning_rate, it, samples);
  if (args_.log_batch_size_to_tensorboard) both("batch-size", static_cast<double>(s.batch_size), it, samples);
  if (std::isfinite(s.loss)) both("lm loss", s.loss, it, samples);
  if (!args_.no_log_loss_scale_to_tensorboard) both("loss-scale", s.loss_scale, it, samples);
  if (args_.log_world_size_to_tensorboard) both("world-size", static_cast<double>(s.world_size), it, samples);
  if (s.grad_norm) both("grad-norm", *s.grad_norm, it, samples);
  if (s.num_zeros_in_grad) both("num-zeros", static_cast<double>(*s.num_zeros_in_grad), it, samples);
  if (s.params_norm) both("params-norm", *s.params_norm, it, samples);
  if (args_.log_memory_to_tensorboard) {
    writer_->add_scalar("mem-reserved-bytes", static_cast<double>(s.reserved_bytes), it);
    writer_->add_scalar("mem-allocated-bytes", static_cast<double>(s.allocated_bytes), it);
    writer_->add_scalar("mem-allocated-count", static_cast<double>(s.allocation_count), it);
  }
}

void TensorBoardLog::log_line(int64_t iteration, double seconds_per_iteration, double tflops_per_gpu,
                              const std::vector<PhaseTiming>& timers) {
  if (args_.log_timers_to_tensorboard) {
    writer_->add_scalar("iteration-time", seconds_per_iteration, iteration);
    if (args_.log_throughput) writer_->add_scalar("throughput", tflops_per_gpu, iteration);
    for (const PhaseTiming& timer : timers) writer_->add_scalar(timer.name + "-time", timer.max_ms, iteration);
  }
  writer_->flush();  // what TensorBoard shows is at most one log interval behind
}

void TensorBoardLog::moe(int64_t iteration, const std::vector<std::pair<std::string, double>>& losses,
                         const std::vector<std::pair<std::string, double>>& layer_losses) {
  for (const auto& [name, value] : losses) writer_->add_scalar(name, value, iteration);
  for (const auto& [name, value] : layer_losses) writer_->add_scalar(name, value, iteration);
}

void TensorBoardLog::validation(int64_t iteration, int64_t consumed_samples, double loss) {
  both("lm loss validation", loss, iteration, consumed_samples);
  if (args_.log_validation_ppl_to_tensorboard) {
    both("lm loss validation ppl", std::exp(std::min(20.0, loss)), iteration, consumed_samples);
  }
  writer_->flush();
}

}  // namespace gpt
