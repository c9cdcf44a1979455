#include "train/report/metrics_file.h"

#include "train/report/expert_load.h"

#include <fcntl.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <numeric>

#include "absl/strings/str_cat.h"
#include "absl/strings/str_format.h"

namespace gpt {

std::string json_string(std::string_view text) {
  std::string out = "\"";
  for (const char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\b': out += "\\b"; break;
      case '\f': out += "\\f"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          out += absl::StrFormat("\\u%04x", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out += c;
        }
    }
  }
  out += '"';
  return out;
}

std::string json_number(double value) {
  if (!std::isfinite(value)) return "null";
  // The shortest of %.15g, %.16g, %.17g that reads back exactly (17 digits always do).
  for (int digits = 15; digits < 17; ++digits) {
    std::string text = absl::StrFormat("%.*g", digits, value);
    if (std::strtod(text.c_str(), nullptr) == value) return text;
  }
  return absl::StrFormat("%.17g", value);
}

void JsonObject::key(std::string_view key) {
  if (!body_.empty()) body_ += ", ";
  body_ += json_string(key);
  body_ += ": ";
}

JsonObject& JsonObject::add(std::string_view k, int64_t value) {
  key(k);
  body_ += absl::StrCat(value);
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, double value) {
  key(k);
  body_ += json_number(value);
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, bool value) {
  key(k);
  body_ += value ? "true" : "false";
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, std::string_view value) {
  key(k);
  body_ += json_string(value);
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, const JsonObject& value) {
  key(k);
  body_ += value.str();
  return *this;
}

JsonObject& JsonObject::add(std::string_view k, const std::vector<double>& values) {
  key(k);
  body_ += "[";
  for (size_t i = 0; i < values.size(); ++i) body_ += (i == 0 ? "" : ", ") + json_number(values[i]);
  body_ += "]";
  return *this;
}

JsonObject& JsonObject::add_null(std::string_view k) {
  key(k);
  body_ += "null";
  return *this;
}

std::string iteration_record(const IterationMetrics& m) {
  const IterationLog& log = m.log;
  JsonObject o;
  o.add("iteration", log.iteration)
      .add("train_iters", log.train_iters)
      .add("consumed_samples", log.consumed_samples)
      .add("elapsed_time_per_iteration_ms", log.elapsed_ms_per_iteration)
      .add("throughput_tflops_per_gpu", log.tflops_per_gpu)
      .add("tokens_per_second", m.tokens_per_second)
      .add("learning_rate", log.learning_rate)
      .add("global_batch_size", log.global_batch_size)
      .add("lm_loss", log.lm_loss)
      .add("loss_scale", log.loss_scale)
      .add("grad_norm", log.grad_norm.value_or(NAN))
      .add("skipped_iterations", log.skipped_iterations)
      .add("nan_iterations", log.nan_iterations);
  for (const auto& [name, value] : log.moe_losses) o.add(name, value);
  o.add("timestamp", m.timestamp)
      .add("world_size", m.world_size)
      .add("tensor_model_parallel_size", m.tensor_parallel)
      .add("pipeline_model_parallel_size", m.pipeline_parallel)
      .add("data_parallel_size", m.data_parallel);
  if (!m.timers.empty()) {
    JsonObject timers;
    for (const PhaseTiming& t : m.timers) timers.add(t.name, JsonObject().add("min", t.min_ms).add("max", t.max_ms));
    o.add("timers_ms", timers);
  }
  if (!m.moe_layer_losses.empty()) {
    JsonObject layers;
    for (const auto& [name, value] : m.moe_layer_losses) layers.add(name, value);
    o.add("moe_layers", layers);
  }
  if (!m.expert_load.empty()) {
    JsonObject loads;
    for (const ExpertLoad& load : m.expert_load) {
      const std::vector<double>& tokens = load.tokens_per_expert;
      const double max = tokens.empty() ? 0.0 : *std::max_element(tokens.begin(), tokens.end());
      const double mean =
          tokens.empty() ? 0.0 : std::accumulate(tokens.begin(), tokens.end(), 0.0) / static_cast<double>(tokens.size());
      JsonObject layer = JsonObject()
                             .add("tokens_per_expert", tokens)
                             .add("max", max)
                             .add("mean", mean)
                             .add("max_over_mean", mean > 0 ? max / mean : NAN);
      if (!load.tokens_per_expert_parallel_rank.empty()) {
        layer.add("tokens_per_expert_parallel_rank", load.tokens_per_expert_parallel_rank)
            .add("expert_parallel_max_over_mean", busiest_over_mean(load.tokens_per_expert_parallel_rank));
      }
      loads.add(absl::StrCat("layer_", load.layer), layer);
    }
    o.add("expert_load", loads);
  }
  JsonObject memory;
  memory.add("arena_bytes", m.arena_bytes);
  if (m.device_memory_bytes) memory.add("device_memory_bytes", *m.device_memory_bytes);
  o.add("memory", memory);
  return o.str();
}

std::string validation_record(std::string_view split, int64_t iteration, bool end_of_training, double loss) {
  return JsonObject()
      .add("validation", true)
      .add("split", split)
      .add("iteration", iteration)
      .add("end_of_training", end_of_training)
      .add("lm_loss", loss)
      .add("lm_loss_ppl", std::isnan(loss) ? loss : std::exp(std::min(20.0, loss)))
      .str();
}

absl::StatusOr<std::unique_ptr<MetricsFile>> MetricsFile::open(const std::string& path, bool append) {
  // Non-blocking open: a FIFO nobody reads would otherwise block here, before training, forever
  // (O_NONBLOCK changes nothing for a regular file). Writes block as usual afterwards.
  const int fd =
      ::open(path.c_str(), O_WRONLY | O_CREAT | O_CLOEXEC | O_NONBLOCK | (append ? O_APPEND : O_TRUNC), 0644);
  if (fd < 0) {
    if (errno == ENXIO) {
      return absl::FailedPreconditionError(absl::StrCat(
          "--metrics-file ", path, ": a FIFO with no reader (start the reader first, or give a regular file)"));
    }
    return absl::FailedPreconditionError(
        absl::StrCat("--metrics-file ", path, ": cannot open for writing: ", std::strerror(errno)));
  }
  ::fcntl(fd, F_SETFL, ::fcntl(fd, F_GETFL) & ~O_NONBLOCK);
  std::FILE* file = ::fdopen(fd, append ? "a" : "w");
  if (file == nullptr) {
    const int why = errno;
    ::close(fd);
    return absl::FailedPreconditionError(absl::StrCat("--metrics-file ", path, ": cannot open for writing: ",
                                                      std::strerror(why)));
  }
  return std::unique_ptr<MetricsFile>(new MetricsFile(file, path));
}

MetricsFile::~MetricsFile() { std::fclose(file_); }

void MetricsFile::write(const std::string& record) {
  const bool ok = std::fwrite(record.data(), 1, record.size(), file_) == record.size() &&
                  std::fputc('\n', file_) != EOF && std::fflush(file_) == 0;
  if (!ok && !warned_) {
    std::fprintf(stderr, "warning: --metrics-file %s: write failed: %s (the training goes on)\n", path_.c_str(),
                 std::strerror(errno));
    warned_ = true;
  }
}

}  // namespace gpt
