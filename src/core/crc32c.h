// CRC-32C (Castagnoli polynomial, reflected 0x82F63B78; iSCSI, RFC 3720), the checksum of the
// TFRecord framing TensorBoard event files use. Table-driven, one byte at a time: it checksums a
// few hundred bytes per log line, so speed does not matter.
#pragma once

#include <cstddef>
#include <cstdint>

namespace gpt {

// The CRC of `size` bytes continuing from `crc` (0 to start): crc32c("123456789") = 0xE3069283.
uint32_t crc32c(const void* data, size_t size, uint32_t crc = 0);

}  // namespace gpt
