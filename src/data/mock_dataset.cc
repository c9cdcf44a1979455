#include "data/mock_dataset.h"

#include <algorithm>

#include "core/check.h"
#include "core/philox.h"

namespace gpt {

MockDataset::MockDataset(uint64_t seed, int64_t vocab_size, int64_t seq_length)
    : key_(philox_key(seed, "mock-data")), vocab_size_(vocab_size), seq_length_(seq_length) {
  GPT_CHECK_GE(vocab_size, 2) << "mock data needs at least one token besides end-of-document";
}

void MockDataset::sample(int64_t index, std::span<int32_t> tokens) const {
  GPT_CHECK_EQ(static_cast<int64_t>(tokens.size()), seq_length_ + 1);
  const int64_t eod = vocab_size_ - 1;
  const int64_t modulus = vocab_size_ - 1;
  // Draws for sample `index` come from counters index * 2^20 + k, k = 0, 1, ...
  uint64_t counter = static_cast<uint64_t>(index) << 20;
  size_t position = 0;
  while (position < tokens.size()) {
    const uint64_t draw = philox_uint64(key_, counter++);
    // Starts among the first 8 * seq_length ids (as Megatron's mock documents use small ids), so
    // that even with a GPT-2-sized vocabulary every id in use is seen often enough to learn.
    const int64_t start_range = std::min(modulus, 8 * seq_length_);
    int64_t value = static_cast<int64_t>(draw % static_cast<uint64_t>(start_range));
    const int64_t stride = 1 + static_cast<int64_t>((draw >> 32) % 3);
    const int64_t length = 1 + static_cast<int64_t>((draw >> 40) % static_cast<uint64_t>(2 * seq_length_));
    for (int64_t i = 0; i < length && position < tokens.size(); ++i) {
      tokens[position++] = static_cast<int32_t>(value);
      value = (value + stride) % modulus;
    }
    if (position < tokens.size()) tokens[position++] = static_cast<int32_t>(eod);
  }
}

}  // namespace gpt
