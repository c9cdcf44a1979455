// Samples during training (--sample-interval N, --sample-prompt TEXT; llm.c's habit, this
// program's flags): every N iterations the logging rank prints a continuation of a fixed prompt
// written by the current weights. Collective: every rank copies the parameter pieces it would save
// in a checkpoint (each element once, whatever the TP x PP x DP layout) to the host and sends them to
// the logging rank, which assembles the global FP32 tensors and runs generate's model with a KV cache
// (src/generate) on the CPU. Nothing of the training state is changed: the parameters are only read,
// after the step's updates and gathers have settled, so the losses are those of a run without
// sampling.
#pragma once

#include <memory>

#include "core/status.h"
#include "data/text_tokenizer.h"
#include "train/args/arguments.h"
#include "train/training_state.h"

namespace gpt {

class ProcessGrid;

class TrainingSampler {
 public:
  TrainingSampler(const Arguments& args, const ProcessGrid& grid);
  // After each iteration (`iteration`, the one just trained): at multiples of --sample-interval,
  // the sample of the rank's `parameters` (collective).
  absl::Status after_iteration(const RankParameters& parameters, int64_t iteration);
  // The continuation's text (or ids) for the current weights, on the logging rank; empty elsewhere.
  absl::StatusOr<std::string> sample(const RankParameters& parameters, int64_t iteration);

 private:
  const Arguments& args_;
  const ProcessGrid& grid_;
  std::unique_ptr<TextTokenizer> tokenizer_;  // the run's text tokenizer, once read
};

}  // namespace gpt
