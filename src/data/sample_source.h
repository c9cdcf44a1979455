// Anything that yields training samples by global index: seq_length + 1 consecutive token ids
// (inputs are the first seq_length, targets the last seq_length).
#pragma once

#include <cstdint>
#include <span>

namespace gpt {

class SampleSource {
 public:
  virtual ~SampleSource() = default;
  virtual int64_t seq_length() const = 0;
  // Writes sample `index` (seq_length + 1 tokens) into `tokens`.
  virtual void sample(int64_t index, std::span<int32_t> tokens) const = 0;
};

}  // namespace gpt
