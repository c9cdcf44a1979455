// Fault injection for the crash and hang tests: GPT_CHECKPOINT_FAULT=<point>:<world rank> makes
// that rank kill itself with SIGKILL at that point; GPT_CHECKPOINT_FAULT=<point>:<world rank>:stop
// stops it with SIGSTOP instead (a rank that hangs: the others must time out, naming the
// agreement and the rank). Points: startup (before the ranks compare their arguments),
// ranks-per-gpu (before the node's ranks compare the GPUs they will use), load
// (before the ranks agree that a checkpoint loaded), save-handshake (before the ranks agree that a
// save's directory exists), after-shard (a shard written and synced), before-rename (rank 0, the
// index written), before-tracker (rank 0, the directory renamed). Unset in normal runs; read at
// each point so that a test can aim at one.
//
// GPT_INJECT_DELAY=<ms> or <ms>:<world rank> makes every rank (or that one) sleep that long in each
// training iteration's forward-backward phase: a slow job for the Slurm time-limit tests, a straggler
// for --log-straggler. Numbers are unchanged.
#pragma once

#include <cstdint>

namespace gpt {

void maybe_inject_fault(const char* point, int world_rank);
void maybe_inject_delay(int world_rank);

// GPT_GRADIENT_FAULT=<iteration>:<world rank>: true on that rank at that (1-based) training
// iteration, whose reduced gradients the trainer then gives one infinite element (the loss
// scaler's skip test). Unset in normal runs.
bool gradient_fault_at(int64_t iteration, int world_rank);

// GPT_CHECKPOINT_FAULT=<point>:<world rank>:corrupt asks that rank to corrupt what it holds at that
// point instead of dying (point replica-weights: one bit of its parameter copy before the replicas
// compare hashes, train/resilience/replica_check.h). True when this rank is asked to.
bool corruption_requested(const char* point, int world_rank);

}  // namespace gpt
