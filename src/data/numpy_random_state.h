// numpy's legacy generator, numpy.random.RandomState(seed), as far as Megatron's GPT dataset uses
// it: seeding with an integer, and RandomState.shuffle of a 1-D array. Reproducing it draw for draw
// is what makes the document and shuffle indices equal Megatron's for the same seed.
//
//   seeding   RandomState(seed) with an integer seed in [0, 2^32) is MT19937's init_genrand
//             (numpy's mt19937_seed, reached through _legacy_seeding; not init_by_array, which is
//             for array seeds). std::mt19937 seeded with one value is exactly that generator.
//   bounds    legacy_random_interval(max): the smallest all-ones mask >= max, then 32-bit draws
//             (64-bit, high word first, when max >= 2^32) masked and rejected until <= max
//             (numpy's random_interval).
//   shuffle   Fisher-Yates from the end: for i = n-1 down to 1, swap x[i] with
//             x[random_interval(i)] (RandomState.shuffle; the draw is made even when it picks i).
#pragma once

#include <cstdint>
#include <random>
#include <span>
#include <utility>

namespace gpt {

class NumpyRandomState {
 public:
  explicit NumpyRandomState(uint32_t seed) : engine_(seed) {}

  uint32_t next_uint32() { return static_cast<uint32_t>(engine_()); }
  uint64_t next_uint64() {
    const uint64_t high = next_uint32();
    return high << 32 | next_uint32();
  }
  // RandomState.random_sample(): 53 random bits from two draws.
  double random_sample();
  // A uniform integer in [0, max]; also what legacy randint(low, high) draws for high - 1 - low.
  uint64_t random_interval(uint64_t max);

  template <typename T>
  void shuffle(std::span<T> values) {
    for (size_t i = values.size(); i-- > 1;) {
      const size_t j = static_cast<size_t>(random_interval(i));
      if (j != i) std::swap(values[i], values[j]);
    }
  }

 private:
  std::mt19937 engine_;
};

}  // namespace gpt
