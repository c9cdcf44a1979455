#include "core/logging.h"

#include <unistd.h>

#include <atomic>
#include <cstdio>

#include "core/check.h"

namespace gpt {
namespace {
std::atomic<int> g_log_rank{-1};
std::atomic<int64_t> g_log_threshold{0};  // Python's NOTSET: every line
std::atomic<FatalHandler> g_fatal_handler{nullptr};

std::string rank_prefix() {
  const int rank = g_log_rank.load();
  return rank < 0 ? std::string() : "[rank " + std::to_string(rank) + "] ";
}

void write_all(int fd, const std::string& text) {
  size_t written = 0;
  while (written < text.size()) {
    const ssize_t n = ::write(fd, text.data() + written, text.size() - written);
    if (n <= 0) return;
    written += static_cast<size_t>(n);
  }
}
}  // namespace

void set_log_rank(int rank) { g_log_rank.store(rank); }

void set_log_threshold(int64_t python_level) { g_log_threshold.store(python_level); }

bool log_level_shown(LogLevel level) {
  constexpr int64_t kPythonInfo = 20, kPythonWarning = 30;
  const int64_t threshold = g_log_threshold.load();
  return level == LogLevel::kError || (level == LogLevel::kWarning ? kPythonWarning : kPythonInfo) >= threshold;
}

void log_line(LogLevel level, const std::string& text) {
  if (!log_level_shown(level)) return;
  const char* tag = level == LogLevel::kInfo ? "" : level == LogLevel::kWarning ? "warning: " : "error: ";
  write_all(STDERR_FILENO, rank_prefix() + tag + text + "\n");
}

namespace internal {
LogMessage::LogMessage(LogLevel level) : level_(level) {}
LogMessage::~LogMessage() { log_line(level_, stream_.str()); }

FatalMessage::FatalMessage(const char* file, int line, const char* condition) {
  stream_ << "FATAL " << file << ":" << line << ": ";
  if (condition != nullptr) stream_ << "check failed: " << condition << " ";
}

FatalMessage::~FatalMessage() {
  std::fflush(stdout);
  log_line(LogLevel::kError, stream_.str());
  fatal_exit(1);
}
}  // namespace internal

void set_fatal_handler(FatalHandler handler) { g_fatal_handler.store(handler); }

void fatal_exit(int exit_code) {
  std::fflush(stdout);
  std::fflush(stderr);
  if (FatalHandler handler = g_fatal_handler.load()) handler(exit_code);
  std::abort();
}

}  // namespace gpt
