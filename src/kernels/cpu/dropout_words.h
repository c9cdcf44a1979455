// The 32 random bits of a run of consecutive dropout positions (kernels/dropout_mask.h), many
// Philox blocks at a time: the same bits as ops::dropout_keeps reads, one block per four positions,
// with the blocks' rounds interleaved across lanes so that the compiler vectorizes them.
#pragma once

#include <cstdint>

namespace gpt::cpu {

// words[k] = the random bits of position first_position + k of sample `sample` under `key`,
// for k in [0, count).
void dropout_words(uint64_t key, uint64_t sample, uint64_t first_position, int64_t count, uint32_t* words);

// Words below this many positions per call are generated in one piece (callers' buffers).
constexpr int64_t kDropoutChunk = 1024;

}  // namespace gpt::cpu
