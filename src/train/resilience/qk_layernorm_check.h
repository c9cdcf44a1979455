// Megatron's --test-mode (TransformerConfig.test_mode): its real-time test, Attention's
// run_realtime_tests, asserts in every forward that all tensor- and data-parallel ranks hold the
// same --qk-layernorm parameters (q_layernorm / k_layernorm weights and biases: replicated across
// TP, their gradients summed over it, so a missing or broken sum shows as ranks that drifted
// apart). Here every rank hashes the q/k norm parameters of its layers (FNV-1a over their bytes)
// before the first iteration and after each one, i.e. at every state a forward reads, and the
// ranks of one pipeline stage (every tensor-, data- and context-parallel rank) must agree.
// Without --qk-layernorm there is nothing to check, as in Megatron.
#pragma once

#include "core/status.h"
#include "parallel/process_grid.h"
#include "train/args/arguments.h"
#include "train/training_state.h"

namespace gpt {

// Collective over the world (every rank calls it at the same point: its parameters after
// `iteration`). OK without --test-mode or --qk-layernorm; otherwise an error naming the iteration
// and the ranks that differ.
absl::Status check_qk_layernorm_replicas(const RankParameters& parameters, int64_t iteration, const ProcessGrid& grid,
                                         const Arguments& args);

}  // namespace gpt
