// Philox4x32-10 (Salmon et al., "Parallel random numbers: as easy as 1, 2, 3", SC'11): a
// counter-based generator. The output depends only on (key, counter), so any element of any
// global tensor can be generated independently, in any order, on any rank.
#pragma once

#include <array>
#include <cstdint>
#include <string_view>

namespace gpt {

using PhiloxBlock = std::array<uint32_t, 4>;

constexpr PhiloxBlock philox4x32_10(uint64_t key, uint64_t counter_high, uint64_t counter_low) {
  constexpr uint32_t kMultiplier0 = 0xD2511F53u, kMultiplier1 = 0xCD9E8D57u;
  constexpr uint32_t kWeyl0 = 0x9E3779B9u, kWeyl1 = 0xBB67AE85u;
  uint32_t k0 = static_cast<uint32_t>(key), k1 = static_cast<uint32_t>(key >> 32);
  PhiloxBlock c = {static_cast<uint32_t>(counter_low), static_cast<uint32_t>(counter_low >> 32),
                   static_cast<uint32_t>(counter_high), static_cast<uint32_t>(counter_high >> 32)};
  for (int round = 0; round < 10; ++round) {
    const uint64_t product0 = static_cast<uint64_t>(kMultiplier0) * c[0];
    const uint64_t product1 = static_cast<uint64_t>(kMultiplier1) * c[2];
    const uint32_t hi0 = static_cast<uint32_t>(product0 >> 32), lo0 = static_cast<uint32_t>(product0);
    const uint32_t hi1 = static_cast<uint32_t>(product1 >> 32), lo1 = static_cast<uint32_t>(product1);
    c = {hi1 ^ c[1] ^ k0, lo1, hi0 ^ c[3] ^ k1, lo0};
    k0 += kWeyl0;
    k1 += kWeyl1;
  }
  return c;
}

// 64-bit FNV-1a of a string; used to turn a parameter's global name into part of its key.
constexpr uint64_t fnv1a_64(std::string_view text) {
  uint64_t hash = 0xcbf29ce484222325ull;
  for (char ch : text) {
    hash ^= static_cast<uint8_t>(ch);
    hash *= 0x100000001b3ull;
  }
  return hash;
}

// SplitMix64 finalizer: decorrelates nearby seeds.
constexpr uint64_t splitmix64(uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Key for a named stream under a seed: (seed, name) -> 64-bit Philox key.
constexpr uint64_t philox_key(uint64_t seed, std::string_view stream_name) {
  return splitmix64(splitmix64(seed) ^ fnv1a_64(stream_name));
}

// Uniform in (0, 1] from 32 random bits (never 0, so log() is safe).
constexpr double uniform_open_closed(uint32_t bits) { return (static_cast<double>(bits) + 1.0) / 4294967296.0; }

// Standard normal for element `index` of the stream `key` (Box-Muller on one Philox block).
double philox_normal(uint64_t key, uint64_t index);
// Uniform in [0, 1) for element `index`, and a uniform 64-bit integer.
double philox_uniform(uint64_t key, uint64_t index);
uint64_t philox_uint64(uint64_t key, uint64_t index);

}  // namespace gpt
