#include "data/microbatch.h"

namespace gpt {

int64_t first_sample_of_microbatch(int64_t consumed_samples, int64_t microbatch, int64_t mbs, int64_t dp,
                                   int64_t dp_rank) {
  return consumed_samples + microbatch * mbs * dp + dp_rank * mbs;
}

void load_microbatch(const SampleSource& source, int64_t consumed_samples, int64_t microbatch, int64_t mbs,
                     int64_t dp, int64_t dp_rank, Microbatch& out) {
  const int64_t s = source.seq_length();
  out.tokens.resize(static_cast<size_t>(mbs * s));
  out.targets.resize(static_cast<size_t>(mbs * s));
  std::vector<int32_t> sample(static_cast<size_t>(s + 1));
  const int64_t first = first_sample_of_microbatch(consumed_samples, microbatch, mbs, dp, dp_rank);
  for (int64_t b = 0; b < mbs; ++b) {
    source.sample(first + b, sample);
    for (int64_t i = 0; i < s; ++i) {
      out.tokens[b * s + i] = sample[i];
      out.targets[b * s + i] = sample[i + 1];
    }
  }
}

}  // namespace gpt
