#include "train/data_setup.h"

#include "data/mock_dataset.h"

namespace gpt {

std::array<int64_t, 3> samples_per_split(const Arguments& a) {
  const int64_t evaluations = a.train_iters / a.eval_interval + 1;
  return {a.train_iters * a.global_batch_size, evaluations * a.eval_iters * a.global_batch_size,
          a.eval_iters * a.global_batch_size};
}

absl::StatusOr<DataSources> build_data_sources(const Arguments& a) {
  DataSources sources;
  const uint64_t seed = static_cast<uint64_t>(a.seed);
  // Mock data: three independent streams, one per split.
  sources.vocab_size = a.vocab_size;
  sources.train = std::make_shared<MockDataset>(seed, a.vocab_size, a.seq_length);
  if (a.eval_iters > 0) {
    sources.valid = std::make_shared<MockDataset>(seed + 1, a.vocab_size, a.seq_length);
    sources.test = std::make_shared<MockDataset>(seed + 2, a.vocab_size, a.seq_length);
  }
  return sources;
}

}  // namespace gpt
