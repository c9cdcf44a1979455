// Prints values of the project's Philox, key and dropout-mask functions (core/philox.h,
// kernels/dropout_mask.h) for dropout_masks.py --self-test, which recomputes each in numpy.
// One line per value:
//   philox KEY HIGH LOW W0 W1 W2 W3          (hex)
//   fnv1a_64 TEXT HASH | splitmix64 X Y | philox_key SEED NAME KEY
//   dropout_key SEED ITERATION LAYER SITE KEY
//   threshold P_BITS THRESHOLD              (P_BITS: the float32 probability's bit pattern)
//   keeps KEY SAMPLE FIRST_POSITION P_BITS BITS   (BITS: dropout_keeps for consecutive positions)
#include <bit>
#include <cinttypes>
#include <cstdint>
#include <cstdio>
#include <string>

#include "core/philox.h"
#include "kernels/dropout_mask.h"

namespace {

using gpt::ops::DropoutSite;

uint64_t state = 0x0123456789abcdefull;
uint64_t next() {  // inputs only: any generator does
  state = gpt::splitmix64(state);
  return state;
}

void philox(uint64_t key, uint64_t high, uint64_t low) {
  const gpt::PhiloxBlock b = gpt::philox4x32_10(key, high, low);
  std::printf("philox %" PRIx64 " %" PRIx64 " %" PRIx64 " %x %x %x %x\n", key, high, low, b[0], b[1], b[2], b[3]);
}

void keeps(uint64_t key, uint64_t sample, uint64_t first, float p, int count) {
  const uint64_t threshold = gpt::ops::dropout_threshold(p);
  std::string bits;
  for (int i = 0; i < count; ++i) {
    bits += gpt::ops::dropout_keeps(key, sample, first + static_cast<uint64_t>(i), threshold) ? '1' : '0';
  }
  std::printf("keeps %" PRIx64 " %" PRIu64 " %" PRIu64 " %x %s\n", key, sample, first, std::bit_cast<uint32_t>(p),
              bits.c_str());
}

}  // namespace

int main() {
  philox(0, 0, 0);
  philox(~0ull, ~0ull, ~0ull);
  for (int i = 0; i < 64; ++i) philox(next(), i % 4 == 0 ? next() >> 40 : next(), i % 3 == 0 ? next() >> 50 : next());
  for (const char* text : {"a", "dropout", "embedding.word_embeddings.weight"}) {
    std::printf("fnv1a_64 %s %" PRIx64 "\n", text, gpt::fnv1a_64(text));
  }
  for (int i = 0; i < 16; ++i) {
    const uint64_t x = i < 4 ? static_cast<uint64_t>(i) : next();
    std::printf("splitmix64 %" PRIx64 " %" PRIx64 "\n", x, gpt::splitmix64(x));
  }
  for (uint64_t seed : {0ull, 7ull, 1234ull, ~0ull}) {
    std::printf("philox_key %" PRIx64 " dropout %" PRIx64 "\n", seed, gpt::philox_key(seed, "dropout"));
  }
  for (uint64_t seed : {0ull, 7ull, 1234ull, 0xfedcba9876543210ull}) {
    for (int64_t iteration : {int64_t{1}, int64_t{2}, int64_t{10}, int64_t{123456789}}) {
      for (int64_t layer : {int64_t{-1}, int64_t{0}, int64_t{1}, int64_t{47}}) {
        for (uint64_t site = 1; site <= 4; ++site) {
          std::printf("dropout_key %" PRIx64 " %" PRId64 " %" PRId64 " %" PRIu64 " %" PRIx64 "\n", seed, iteration,
                      layer, site, gpt::ops::dropout_key(seed, iteration, layer, static_cast<DropoutSite>(site)));
        }
      }
    }
  }
  for (float p : {0.0f, 0.1f, 0.2f, 0.25f, 0.5f, 1.0f / 3.0f, 0.9f, 0.999999f, 1e-9f}) {
    std::printf("threshold %x %" PRIu64 "\n", std::bit_cast<uint32_t>(p), gpt::ops::dropout_threshold(p));
  }
  const uint64_t key = gpt::ops::dropout_key(7, 1, 0, DropoutSite::kAttentionProbabilities);
  for (float p : {0.1f, 0.5f, 0.9f}) {
    keeps(key, 0, 0, p, 256);
    keeps(key, 5, 1021, p, 256);  // a start that is not a multiple of 4
    keeps(next(), next() >> 20, next() >> 2, p, 64);
  }
  return 0;
}
