// Rank-prefixed diagnostics on stderr. The training log lines (Megatron's format) are not
// diagnostics: they go to stdout without a prefix, through train/report/log_line.h.
#pragma once

#include <cstdint>
#include <sstream>
#include <string>

namespace gpt {

// The process's rank in the world, used for message prefixes. -1 until the grid is built.
void set_log_rank(int rank);

enum class LogLevel { kInfo, kWarning, kError };

namespace internal {
class LogMessage {
 public:
  explicit LogMessage(LogLevel level);
  ~LogMessage();
  std::ostream& stream() { return stream_; }

 private:
  LogLevel level_;
  std::ostringstream stream_;
};
}  // namespace internal

// Writes one line to stderr atomically (single write call), with the rank prefix.
void log_line(LogLevel level, const std::string& text);

// Megatron's --logging-level: the root logger's threshold in Python's numbers (DEBUG 10, INFO 20,
// WARNING 30, ERROR 40). kInfo lines are Python's INFO (shown below 21), kWarning lines its WARNING
// (shown below 31). kError lines are what Megatron raises as exceptions: always shown.
void set_log_threshold(int64_t python_level);
bool log_level_shown(LogLevel level);

}  // namespace gpt

#define GPT_LOG_WARNING() ::gpt::internal::LogMessage(::gpt::LogLevel::kWarning).stream()
