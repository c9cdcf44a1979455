#include <atomic>
#include <chrono>
#include <cmath>
#include <cstring>
#include <limits>
#include <thread>
#include <vector>

#include "core/arena.h"
#include "core/float16.h"
#include "core/host_worker.h"
#include "core/philox.h"
#include "core/tensor.h"
#include "gtest/gtest.h"

namespace gpt {
namespace {

TEST(Bf16, RoundsToNearestEven) {
  // 1 + 2^-8 lies exactly between two BF16 values (1 and 1 + 2^-7): ties go to the even one (1).
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8)), 1.0f);
  // 1 + 3 * 2^-8 lies between 1 + 2^-7 (odd mantissa) and 1 + 2^-6: ties go to 1 + 2^-6.
  EXPECT_EQ(round_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)), 1.0f + std::ldexp(1.0f, -6));
  // Just above the tie rounds up.
  EXPECT_EQ(round_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)), 1.0f + std::ldexp(1.0f, -7));
  EXPECT_EQ(bf16(1.0f).bits, 0x3f80);
  EXPECT_EQ(bf16(-2.0f).bits, 0xc000);
  EXPECT_EQ(bf16(0.0f).bits, 0x0000);
  // Overflow rounds to infinity; NaN stays NaN.
  EXPECT_TRUE(std::isinf(round_to_bf16(std::numeric_limits<float>::max())));
  EXPECT_TRUE(std::isnan(round_to_bf16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isnan(bf16_bits_to_float(float_to_bf16_bits(std::nanf("0x1")))));
}

TEST(Bf16, EveryBf16ValueRoundTrips) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    const float value = bf16_bits_to_float(static_cast<uint16_t>(bits));
    if (std::isnan(value)) continue;
    EXPECT_EQ(float_to_bf16_bits(value), bits);
  }
}

TEST(Fp16, KnownValuesAndRanges) {
  EXPECT_EQ(fp16(1.0f).bits, 0x3c00);
  EXPECT_EQ(fp16(-2.0f).bits, 0xc000);
  EXPECT_EQ(fp16(65504.0f).bits, 0x7bff);                // the largest finite half
  EXPECT_EQ(fp16(65519.99f).bits, 0x7bff);               // below the tie: stays finite
  EXPECT_EQ(fp16(65520.0f).bits, 0x7c00);                // the tie rounds to even: infinity
  EXPECT_EQ(fp16(std::ldexp(1.0f, -14)).bits, 0x0400);   // smallest normal
  EXPECT_EQ(fp16(std::ldexp(1.0f, -24)).bits, 0x0001);   // smallest subnormal
  EXPECT_EQ(fp16(std::ldexp(1.0f, -25)).bits, 0x0000);   // half of it ties to even: zero
  EXPECT_EQ(fp16(std::ldexp(3.0f, -26)).bits, 0x0001);   // 0.75 x 2^-24 rounds up
  EXPECT_EQ(fp16(std::ldexp(3.0f, -25)).bits, 0x0002);   // 1.5 x 2^-24 ties to even: 2
  // 1 + 2^-11 lies between 1 and 1 + 2^-10: ties to 1.
  EXPECT_EQ(round_to_fp16(1.0f + std::ldexp(1.0f, -11)), 1.0f);
  EXPECT_TRUE(std::isnan(round_to_fp16(std::numeric_limits<float>::quiet_NaN())));
  EXPECT_TRUE(std::isinf(fp16_bits_to_float(0xfc00)) && fp16_bits_to_float(0xfc00) < 0);
}

#if defined(__FLT16_MAX__)
// Against the compiler's _Float16 (IEEE binary16, conversions rounding to nearest even): every
// half value widens the same, and FP32 values across the whole range (every 1009th bit pattern,
// both signs, NaNs aside) narrow to the same bits.
TEST(Fp16, MatchesTheCompilersFloat16) {
  for (uint32_t bits = 0; bits < 0x10000; ++bits) {
    _Float16 h;
    const uint16_t raw = static_cast<uint16_t>(bits);
    std::memcpy(&h, &raw, 2);
    const float mine = fp16_bits_to_float(raw), theirs = static_cast<float>(h);
    if (std::isnan(theirs)) {
      EXPECT_TRUE(std::isnan(mine)) << bits;
      continue;
    }
    EXPECT_EQ(float_bits(mine), float_bits(theirs)) << bits;
  }
  int64_t mismatches = 0;
  for (uint64_t bits = 0; bits < 0x100000000ull; bits += 1009) {
    const float value = float_from_bits(static_cast<uint32_t>(bits));
    if (std::isnan(value)) continue;
    const _Float16 h = static_cast<_Float16>(value);
    uint16_t theirs;
    std::memcpy(&theirs, &h, 2);
    mismatches += float_to_fp16_bits(value) != theirs ? 1 : 0;
  }
  EXPECT_EQ(mismatches, 0);
}
#endif

// Known-answer tests of Random123's kat_vectors for philox4x32_10.
TEST(Philox, MatchesRandom123KnownAnswers) {
  EXPECT_EQ(philox4x32_10(0, 0, 0), (PhiloxBlock{0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}));
  EXPECT_EQ(philox4x32_10(~0ull, ~0ull, ~0ull), (PhiloxBlock{0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}));
  EXPECT_EQ(philox4x32_10(0x299f31d0a4093822ull, 0x0370734413198a2eull, 0x85a308d3243f6a88ull),
            (PhiloxBlock{0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}));
}

TEST(Philox, NormalsHaveUnitMomentsAndDependOnlyOnKeyAndIndex) {
  const uint64_t key = philox_key(1234, "some.parameter");
  double sum = 0, squares = 0;
  const int n = 200000;
  for (int i = 0; i < n; ++i) {
    const double z = philox_normal(key, i);
    sum += z;
    squares += z * z;
  }
  EXPECT_NEAR(sum / n, 0.0, 0.01);
  EXPECT_NEAR(squares / n, 1.0, 0.01);
  EXPECT_EQ(philox_normal(key, 777), philox_normal(key, 777));
  EXPECT_NE(philox_key(1234, "a"), philox_key(1234, "b"));
  EXPECT_NE(philox_key(1234, "a"), philox_key(1235, "a"));
}

TEST(Tensor, ViewsAndSlices) {
  std::vector<float> data(24);
  for (int i = 0; i < 24; ++i) data[i] = static_cast<float>(i);
  Tensor t(data.data(), DType::kFloat32, Shape({2, 3, 4}), Device::kCpu);
  EXPECT_EQ(t.numel(), 24);
  EXPECT_EQ(t.rows(), 6);
  EXPECT_EQ(t.cols(), 4);
  EXPECT_EQ(t.as_matrix().shape(), Shape({6, 4}));
  Tensor second = t.slice(1, 2);
  EXPECT_EQ(second.shape(), Shape({1, 3, 4}));
  EXPECT_EQ(second.data_as<float>()[0], 12.0f);
  Tensor range = t.flat_range(5, 3);
  EXPECT_EQ(range.data_as<float>()[2], 7.0f);
  EXPECT_DEATH(t.view({5, 5}), "view");
  EXPECT_DEATH(t.data_as<bf16>(), "float32");
  EXPECT_DEATH(t.slice(1, 3), "slice");
}

TEST(Arena, AlignsAllocationsAndRefusesAfterFreeze) {
  Arena arena(Device::kCpu, "test", 1024);
  Tensor a = arena.allocate(DType::kBFloat16, {3});
  Tensor b = arena.allocate_zeroed(DType::kFloat32, {1000});  // larger than a block
  EXPECT_EQ(reinterpret_cast<uintptr_t>(a.data()) % kAllocationAlignment, 0u);
  EXPECT_EQ(reinterpret_cast<uintptr_t>(b.data()) % kAllocationAlignment, 0u);
  for (int i = 0; i < 1000; ++i) ASSERT_EQ(b.data_as<float>()[i], 0.0f);
  arena.freeze();
  EXPECT_DEATH(arena.allocate(DType::kFloat32, {1}), "frozen");
}

TEST(HostWorker, RunsEachTaskOnceOnOneOtherThreadAndWaitsForIt) {
  HostWorker worker;
  std::vector<int> order;
  std::thread::id ran_on;
  for (int i = 0; i < 100; ++i) {
    worker.start([&, i] {
      order.push_back(i);
      ran_on = std::this_thread::get_id();
    });
    worker.wait();  // after wait the task's writes are visible here
    ASSERT_EQ(order.size(), static_cast<size_t>(i + 1));
    ASSERT_NE(ran_on, std::this_thread::get_id());
  }
  for (int i = 0; i < 100; ++i) EXPECT_EQ(order[static_cast<size_t>(i)], i);
  worker.wait();  // nothing in flight: returns at once
}

TEST(HostWorker, DestructorWaitsForTheTaskInFlight) {
  std::atomic<bool> finished{false};
  {
    HostWorker worker;
    worker.start([&] {
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      finished = true;
    });
  }
  EXPECT_TRUE(finished);
}

}  // namespace
}  // namespace gpt
