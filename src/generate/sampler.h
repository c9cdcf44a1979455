// Picking the next token from a row of logits: greedy (argmax, the lowest id on ties) or sampling
// with temperature, top-k and top-p (nucleus, as Hugging Face's: the smallest set of most likely
// tokens whose probability reaches p). The randomness is counter-based: the uniform draw of
// (seed, sequence, step) is Philox4x32-10's, so a prompt's text depends only on the seed, its
// place in the batch and the model, never on how the batch is split or timed.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace gpt {

struct SamplingOptions {
  bool greedy = false;       // or temperature == 0
  float temperature = 1.0f;
  int64_t top_k = 0;         // 0: all tokens
  float top_p = 1.0f;        // 1: no nucleus cut
  uint64_t seed = 1234;
};

class Sampler {
 public:
  explicit Sampler(const SamplingOptions& options) : options_(options) {}
  // logits [vocab] (the real vocabulary only); `sequence` and `step` key the draw.
  int32_t next(std::span<const float> logits, int64_t sequence, int64_t step);

 private:
  SamplingOptions options_;
  std::vector<int32_t> order_;
  std::vector<double> weights_;
};

}  // namespace gpt
