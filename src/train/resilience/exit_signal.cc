#include "train/resilience/exit_signal.h"

#include <atomic>
#include <csignal>

namespace gpt {
namespace {

std::atomic<bool> sigterm_received{false};

void on_sigterm(int) { sigterm_received.store(true); }

}  // namespace

void install_exit_signal_handler() {
  struct sigaction action = {};
  action.sa_handler = on_sigterm;
  sigemptyset(&action.sa_mask);
  sigaction(SIGTERM, &action, nullptr);
}

bool exit_signal_received() { return sigterm_received.load(); }

}  // namespace gpt
