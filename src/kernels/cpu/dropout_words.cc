#include "kernels/cpu/dropout_words.h"

#include <algorithm>

#include "core/philox.h"
#include "kernels/cpu/simd.h"

namespace gpt::cpu {
namespace {

constexpr int kBlocks = 16;  // Philox blocks computed together (lanes)

// Blocks [first_block, first_block + kBlocks) of (key, sample): out[4 * lane + word], exactly
// philox4x32_10(key, sample, first_block + lane) (core/philox.h), written lane-parallel.
GPT_CPU_CLONES void philox_blocks(uint64_t key, uint64_t sample, uint64_t first_block, uint32_t* out) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t c0[kBlocks], c1[kBlocks], c2[kBlocks], c3[kBlocks];
  for (int lane = 0; lane < kBlocks; ++lane) {
    const uint64_t counter = first_block + static_cast<uint64_t>(lane);
    c0[lane] = static_cast<uint32_t>(counter);
    c1[lane] = static_cast<uint32_t>(counter >> 32);
    c2[lane] = static_cast<uint32_t>(sample);
    c3[lane] = static_cast<uint32_t>(sample >> 32);
  }
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  for (int round = 0; round < 10; ++round) {
    for (int lane = 0; lane < kBlocks; ++lane) {
      const uint64_t product0 = static_cast<uint64_t>(kMultiplier0) * c0[lane];
      const uint64_t product1 = static_cast<uint64_t>(kMultiplier1) * c2[lane];
      const uint32_t hi0 = static_cast<uint32_t>(product0 >> 32), lo0 = static_cast<uint32_t>(product0);
      const uint32_t hi1 = static_cast<uint32_t>(product1 >> 32), lo1 = static_cast<uint32_t>(product1);
      const uint32_t n0 = hi1 ^ c1[lane] ^ k0, n2 = hi0 ^ c3[lane] ^ k1;
      c0[lane] = n0;
      c1[lane] = lo1;
      c2[lane] = n2;
      c3[lane] = lo0;
    }
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  for (int lane = 0; lane < kBlocks; ++lane) {
    out[4 * lane + 0] = c0[lane];
    out[4 * lane + 1] = c1[lane];
    out[4 * lane + 2] = c2[lane];
    out[4 * lane + 3] = c3[lane];
  }
}

}  // namespace

void dropout_words(uint64_t key, uint64_t sample, uint64_t first_position, int64_t count, uint32_t* words) {
  uint32_t blocks[4 * kBlocks];
  int64_t k = 0;
  while (k < count) {
    const uint64_t position = first_position + static_cast<uint64_t>(k);
    const uint64_t block = position / 4;
    philox_blocks(key, sample, block, blocks);
    // Positions [4 * block, 4 * (block + kBlocks)) are in `blocks`; copy those from `position` on.
    const int64_t offset = static_cast<int64_t>(position - 4 * block);
    const int64_t take = std::min<int64_t>(count - k, 4 * kBlocks - offset);
    std::copy(blocks + offset, blocks + offset + take, words + k);
    k += take;
  }
}

}  // namespace gpt::cpu
