// --mock-data: deterministic synthetic token sequences, Megatron's flag. Like Megatron's
// MockGPTDataset it needs no files, but its documents have learnable structure so that the loss
// visibly falls: each document is an arithmetic progression (start, start + stride, ...) modulo
// vocab_size - 1, starting below 8 * seq_length, with a stride from {1, 2, 3} and a random length,
// and ends with the end-of-document id vocab_size - 1. Sample i is generated from (seed, i) alone, so any rank reads any sample.
#pragma once

#include "data/sample_source.h"

namespace gpt {

class MockDataset final : public SampleSource {
 public:
  MockDataset(uint64_t seed, int64_t vocab_size, int64_t seq_length);
  int64_t seq_length() const override { return seq_length_; }
  void sample(int64_t index, std::span<int32_t> tokens) const override;

 private:
  uint64_t key_;
  int64_t vocab_size_;
  int64_t seq_length_;
};

}  // namespace gpt
