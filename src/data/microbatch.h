// Which samples a data-parallel rank reads: Megatron's MegatronPretrainingSampler. An iteration
// starting at `consumed_samples` covers global samples [consumed, consumed + gbs); microbatch j of
// DP rank r holds samples consumed + j * mbs * dp + r * mbs + [0, mbs).
#pragma once

#include <cstdint>
#include <vector>

#include "data/sample_source.h"

namespace gpt {

struct Microbatch {
  std::vector<int32_t> tokens;   // [b, s] row-major
  std::vector<int32_t> targets;  // [b, s]: tokens shifted by one
};

int64_t first_sample_of_microbatch(int64_t consumed_samples, int64_t microbatch, int64_t micro_batch_size,
                                   int64_t data_parallel_size, int64_t data_parallel_rank);

// Reads microbatch `microbatch` of this DP rank into `out` (vectors resized once, then reused).
void load_microbatch(const SampleSource& source, int64_t consumed_samples, int64_t microbatch,
                     int64_t micro_batch_size, int64_t data_parallel_size, int64_t data_parallel_rank,
                     Microbatch& out);

}  // namespace gpt
