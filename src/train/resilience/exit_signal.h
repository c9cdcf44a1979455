// --exit-signal-handler's SIGTERM: the handler only records the signal; the trainer checks it after
// each iteration (all ranks agree), saves and exits 0. The launcher installs it before MPI starts
// when the flag is on the command line, so a signal in a job's first second (Slurm may signal a
// requeued job again right away, docs/SLURM.md) is kept for the first iteration instead of killing
// the process before its checkpoint is loaded.
#pragma once

namespace gpt {

void install_exit_signal_handler();
bool exit_signal_received();

}  // namespace gpt
