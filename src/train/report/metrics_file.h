// --metrics-file PATH: one JSON object per line (JSON Lines) for scripts and plots, written by the
// rank that prints the log line. One record per training log line, carrying every field of the
// line, tokens per second, the layout, the per-phase timers (with --timing-log-level >= 1) and
// memory; one record per evaluation the trainer prints; with --timing-log-level 2 and pipeline
// parallelism, one pipeline timeline per log line (train/report/pipeline_timeline.h). Records are
// flushed as they are written, so a killed job keeps what it logged. A run that starts at
// iteration 0 truncates the file; a resumed run (--load of a checkpoint past iteration 0) appends
// to it.
//
// Non-finite numbers (a nan loss, an inf gradient norm) are written as null, so that every line
// is valid JSON (RFC 8259 has no nan or inf).
#pragma once

#include <cstdint>
#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/status.h"
#include "train/report/log_line.h"

namespace gpt {

// `text` as a JSON string literal, quotes included: ", \ and control characters escaped (\n, \t,
// ..., \u00XX); other bytes, UTF-8 included, are copied as they are.
std::string json_string(std::string_view text);
// `value` as a JSON number: the shortest text that reads back to the same double ("%.17g" at most);
// null when it is not finite.
std::string json_number(double value);

// A flat or nested JSON object built field by field, keys in the order added.
class JsonObject {
 public:
  JsonObject& add(std::string_view key, int64_t value);
  JsonObject& add(std::string_view key, int value) { return add(key, static_cast<int64_t>(value)); }
  JsonObject& add(std::string_view key, double value);
  JsonObject& add(std::string_view key, bool value);
  JsonObject& add(std::string_view key, std::string_view value);
  JsonObject& add(std::string_view key, const char* value) { return add(key, std::string_view(value)); }
  JsonObject& add(std::string_view key, const JsonObject& value);
  JsonObject& add_null(std::string_view key);
  // A JSON array of numbers.
  JsonObject& add(std::string_view key, const std::vector<double>& values);
  // One line: "{...}" without a newline.
  std::string str() const { return "{" + body_ + "}"; }

 private:
  void key(std::string_view key);
  std::string body_;
};

// One phase's time per iteration over the ranks, in milliseconds (Trainer's timers).
struct PhaseTiming {
  std::string name;  // "forward-backward", "all-grads-sync", "optimizer"
  double min_ms = 0.0;
  double max_ms = 0.0;
};

// One MoE layer's expert load over a log interval: the (token, expert) pairs each expert kept per
// iteration (the global batch's, averaged over the interval's iterations).
struct ExpertLoad {
  int64_t layer = 0;  // global, 0-based
  std::vector<double> tokens_per_expert;
  std::vector<double> tokens_per_expert_parallel_rank;  // [EP] with EP > 1 (train/report/expert_load.h), else empty
};

// A training log line's record: the line's fields plus what is not on it.
struct IterationMetrics {
  IterationLog log;
  std::string timestamp;  // the log line's, "YYYY-mm-dd HH:MM:SS"
  double tokens_per_second = 0.0;  // global batch x sequence length / seconds per iteration
  int64_t world_size = 1, tensor_parallel = 1, pipeline_parallel = 1, data_parallel = 1;
  std::vector<PhaseTiming> timers;  // empty without --timing-log-level
  int64_t arena_bytes = 0;  // this rank's arena in use
  std::optional<int64_t> device_memory_bytes;  // on the GPU: the device's memory in use
  // Mixture of experts: Megatron's per-layer losses ("moe/<name>_layer_<i>", with
  // --moe-per-layer-logging) and the expert load per MoE layer, both over the interval.
  std::vector<std::pair<std::string, double>> moe_layer_losses;
  std::vector<ExpertLoad> expert_load;
};
// Its fields: the log line's, with Megatron's MoE losses under their names; then with MoE
// "moe_layers": {"moe/load_balancing_loss_layer_1": ...} (with --moe-per-layer-logging) and
// "expert_load": {"layer_1": {"tokens_per_expert": [...], "max": ..., "mean": ...,
// "max_over_mean": ...}, ...}.
std::string iteration_record(const IterationMetrics& m);

// An evaluation's record: {"validation": true, "split": "valid"|"test", "iteration": ...,
// "end_of_training": ..., "lm_loss": ..., "lm_loss_ppl": ...}; the perplexity as printed,
// exp(min(20, loss)), except that a nan loss has a null perplexity.
std::string validation_record(std::string_view split, int64_t iteration, bool end_of_training, double loss);

// The open file; lines are written and flushed one at a time.
class MetricsFile {
 public:
  // Truncates (append = false) or appends to `path`; an error names the path and the reason.
  static absl::StatusOr<std::unique_ptr<MetricsFile>> open(const std::string& path, bool append);
  ~MetricsFile();
  MetricsFile(const MetricsFile&) = delete;
  MetricsFile& operator=(const MetricsFile&) = delete;
  // Writes `record` and a newline and flushes; a failed write is reported once on stderr and the
  // training goes on (the metrics are a by-product, not the job).
  void write(const std::string& record);

 private:
  MetricsFile(std::FILE* file, std::string path) : file_(file), path_(std::move(path)) {}
  std::FILE* file_;
  std::string path_;
  bool warned_ = false;
};

}  // namespace gpt
