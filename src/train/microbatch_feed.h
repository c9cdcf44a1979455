// The microbatches of one forward_backward call, as the model chunks ask for them: this
// data-parallel rank's share of the global batch that starts at sample `consumed` of a split
// (Megatron's sampler, data/microbatch.h), and where the loss of the last chunk goes.
#pragma once

#include <cstdint>
#include <optional>

#include "data/microbatch.h"
#include "data/sample_source.h"
#include "model/gpt_model.h"
#include "model/microbatch_position.h"

namespace gpt {

class MicrobatchFeed {
 public:
  MicrobatchFeed(int64_t micro_batch_size, int64_t data_parallel_size, int64_t data_parallel_rank,
                 int64_t vocab_size);

  // The batch of the next call: global samples [consumed, consumed + global batch) of `source`;
  // the last chunk adds its losses to `loss`. training_iteration: the iteration being trained
  // (1-based; its dropout masks), or nothing for evaluation (no dropout).
  void start(const SampleSource& source, int64_t consumed, LossAccumulator loss,
             std::optional<int64_t> training_iteration = std::nullopt);

  // Reads microbatch `microbatch` and copies its tokens (chunks with the embedding) and targets
  // (chunks with the output layer) into the model's stash slot. A token id outside the vocabulary
  // is fatal (the dataset was prepared with another tokenizer).
  void load(Context& ctx, GptModel& model, int slot, int64_t microbatch);

  // Where microbatch `microbatch` of this rank sits: the global index of its first sample and the
  // iteration, for its dropout masks.
  MicrobatchPosition position(int64_t microbatch) const;

  const LossAccumulator& loss() const { return loss_; }
  // The microbatch read last (token ids [b, s]).
  const Microbatch& last() const { return microbatch_; }

 private:
  int64_t micro_batch_size_, data_parallel_size_, data_parallel_rank_, vocab_size_;
  const SampleSource* source_ = nullptr;
  int64_t consumed_ = 0;
  std::optional<int64_t> training_iteration_;
  LossAccumulator loss_;
  Microbatch microbatch_;
};

}  // namespace gpt
