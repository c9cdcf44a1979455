// TensorBoard's TFRecord framing and its checksum, against published values: CRC-32C check values
// from RFC 3720 (B.4) and the "123456789" check value of the Castagnoli CRC, and a record laid out
// byte by byte. The whole file is read back by an independent reader in tests/integration.
#include <cstdint>
#include <cstring>
#include <string>

#include "core/crc32c.h"
#include "gtest/gtest.h"
#include "train/report/tensorboard/event_file_writer.h"

namespace gpt {
namespace {

TEST(Crc32c, PublishedCheckValues) {
  EXPECT_EQ(crc32c("123456789", 9), 0xE3069283u);
  const std::string zeros(32, '\0'), ones(32, '\xff');
  EXPECT_EQ(crc32c(zeros.data(), zeros.size()), 0x8A9136AAu);
  EXPECT_EQ(crc32c(ones.data(), ones.size()), 0x62A8AB43u);
  std::string ascending(32, '\0');
  for (int i = 0; i < 32; ++i) ascending[i] = static_cast<char>(i);
  EXPECT_EQ(crc32c(ascending.data(), ascending.size()), 0x46DD794Eu);
  // Continuing a CRC equals the CRC of the concatenation.
  EXPECT_EQ(crc32c("6789", 4, crc32c("12345", 5)), 0xE3069283u);
}

TEST(TfRecord, LengthPayloadAndMaskedChecksums) {
  const std::string payload = "hello";
  const std::string record = tensorboard::tfrecord(payload);
  ASSERT_EQ(record.size(), 8 + 4 + payload.size() + 4);
  uint64_t length = 0;
  std::memcpy(&length, record.data(), 8);  // little-endian on the machines this runs on
  EXPECT_EQ(length, payload.size());
  auto u32 = [&](size_t at) {
    uint32_t value = 0;
    std::memcpy(&value, record.data() + at, 4);
    return value;
  };
  auto masked = [](uint32_t crc) { return ((crc >> 15) | (crc << 17)) + 0xa282ead8u; };
  EXPECT_EQ(u32(8), masked(crc32c(record.data(), 8)));
  EXPECT_EQ(record.substr(12, payload.size()), payload);
  EXPECT_EQ(u32(12 + payload.size()), masked(crc32c(payload.data(), payload.size())));
  EXPECT_EQ(tensorboard::masked_crc32c(payload.data(), payload.size()), u32(12 + payload.size()));
}

}  // namespace
}  // namespace gpt
