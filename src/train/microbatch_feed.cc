#include "train/microbatch_feed.h"

#include "core/check.h"

namespace gpt {

MicrobatchFeed::MicrobatchFeed(int64_t micro_batch_size, int64_t data_parallel_size, int64_t data_parallel_rank,
                               int64_t vocab_size)
    : micro_batch_size_(micro_batch_size),
      data_parallel_size_(data_parallel_size),
      data_parallel_rank_(data_parallel_rank),
      vocab_size_(vocab_size) {}

void MicrobatchFeed::start(const SampleSource& source, int64_t consumed, LossAccumulator loss,
                           std::optional<int64_t> training_iteration) {
  source_ = &source;
  consumed_ = consumed;
  loss_ = std::move(loss);
  training_iteration_ = training_iteration;
}

MicrobatchPosition MicrobatchFeed::position(int64_t microbatch) const {
  return {.training = training_iteration_.has_value(),
          .iteration = training_iteration_.value_or(0),
          .first_sample = first_sample_of_microbatch(consumed_, microbatch, micro_batch_size_, data_parallel_size_,
                                                     data_parallel_rank_)};
}

void MicrobatchFeed::load(Context& ctx, GptModel& model, int slot, int64_t microbatch) {
  GPT_CHECK(source_ != nullptr) << "microbatch requested before the feed was started";
  load_microbatch(*source_, consumed_, microbatch, micro_batch_size_, data_parallel_size_, data_parallel_rank_,
                  microbatch_);
  for (const std::vector<int32_t>* ids : {&microbatch_.tokens, &microbatch_.targets}) {
    for (int32_t id : *ids) {
      GPT_CHECK(id >= 0 && id < vocab_size_) << "token id " << id << " outside the vocabulary of " << vocab_size_
                                             << " (was the dataset prepared with another tokenizer?)";
    }
  }
  if (model.layout().has_embedding) model.load_tokens(ctx, slot, microbatch_.tokens);
  if (model.layout().has_output) model.load_targets(ctx, slot, microbatch_.targets);
}

}  // namespace gpt
