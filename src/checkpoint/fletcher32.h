// HDF5's Fletcher-32 checksum (H5_checksum_fletcher32): 16-bit big-endian words summed modulo
// 65535 in blocks of 360, an odd last byte as the high half of a word. The filter stores it after
// a chunk's data, little-endian (some old HDF5 versions wrote it byte-reversed; both are accepted
// on read, as HDF5 does). Ours so that checkpoint loads can verify chunks on several threads
// outside the (single-threaded) HDF5 library.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpt {

inline uint32_t fletcher32(const void* bytes, size_t length) {
  const uint8_t* data = static_cast<const uint8_t*>(bytes);
  size_t words = length / 2;
  uint32_t sum1 = 0, sum2 = 0;
  while (words > 0) {
    size_t block = words > 360 ? 360 : words;
    words -= block;
    do {
      sum1 += static_cast<uint32_t>((static_cast<uint16_t>(data[0]) << 8) | static_cast<uint16_t>(data[1]));
      data += 2;
      sum2 += sum1;
    } while (--block);
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  if (length % 2 != 0) {
    sum1 += static_cast<uint32_t>(static_cast<uint16_t>(*data) << 8);
    sum2 += sum1;
    sum1 = (sum1 & 0xffff) + (sum1 >> 16);
    sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  }
  sum1 = (sum1 & 0xffff) + (sum1 >> 16);
  sum2 = (sum2 & 0xffff) + (sum2 >> 16);
  return (sum2 << 16) | sum1;
}

// True when the 4 bytes stored after a chunk's `length` data bytes are its checksum.
inline bool fletcher32_matches(const void* chunk, size_t length) {
  const uint8_t* stored = static_cast<const uint8_t*>(chunk) + length;
  const uint32_t little = static_cast<uint32_t>(stored[0]) | static_cast<uint32_t>(stored[1]) << 8 |
                          static_cast<uint32_t>(stored[2]) << 16 | static_cast<uint32_t>(stored[3]) << 24;
  const uint32_t reversed = __builtin_bswap32(little);
  const uint32_t computed = fletcher32(chunk, length);
  return computed == little || computed == reversed;
}

}  // namespace gpt
