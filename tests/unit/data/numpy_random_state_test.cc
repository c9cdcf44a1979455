// NumpyRandomState against numpy 1.24.2 (Debian's python3-numpy), values printed by
//   r = numpy.random.RandomState(seed); r.randint(0, 2**32, dtype=numpy.int64), r.random_sample(),
//   r.randint(0, 1001, dtype=numpy.int64), r.randint(0, 2**40 + 5, dtype=numpy.int64),
//   a = numpy.arange(n); r.shuffle(a)
// (legacy randint with an int64 range draws exactly random_interval(high - 1 - low)).
#include "data/numpy_random_state.h"

#include <cstdint>
#include <numeric>
#include <vector>

#include "gtest/gtest.h"

namespace gpt {
namespace {

std::vector<int32_t> shuffled(uint32_t seed, int n) {
  NumpyRandomState random_state(seed);
  std::vector<int32_t> values(static_cast<size_t>(n));
  std::iota(values.begin(), values.end(), 0);
  random_state.shuffle(std::span<int32_t>(values));
  return values;
}

TEST(NumpyRandomState, RawDrawsMatchNumpy) {
  // r.randint(0, 2**32, dtype=numpy.int64) is one raw 32-bit draw: this checks the seeding
  // (init_genrand, not init_by_array) and MT19937 itself.
  const std::vector<std::pair<uint32_t, std::vector<uint32_t>>> cases = {
      {0, {2357136044u, 2546248239u, 3071714933u}},
      {1234, {822569775u, 2137449171u, 2671936806u}},
      {4294967295u, {419326371u, 479346978u, 3918654476u}},
  };
  for (const auto& [seed, draws] : cases) {
    NumpyRandomState random_state(seed);
    for (uint32_t expected : draws) EXPECT_EQ(random_state.next_uint32(), expected) << "seed " << seed;
  }
}

TEST(NumpyRandomState, RandomSampleMatchesNumpy) {
  NumpyRandomState zero(0), seed(1234), largest(4294967295u);
  EXPECT_EQ(zero.random_sample(), 0.5488135039273248);
  EXPECT_EQ(zero.random_sample(), 0.7151893663724195);
  EXPECT_EQ(seed.random_sample(), 0.1915194503788923);
  EXPECT_EQ(seed.random_sample(), 0.6221087710398319);
  EXPECT_EQ(largest.random_sample(), 0.0976320289940138);
  EXPECT_EQ(largest.random_sample(), 0.9123828453026218);
}

TEST(NumpyRandomState, BoundedIntegersMatchNumpy) {
  struct Case {
    uint32_t seed;
    std::vector<uint64_t> small, large;
  };
  const std::vector<Case> cases = {
      {0, {684, 559, 629, 192, 835}, {741280623151, 506137267392, 841157541223}},
      {1234, {815, 723, 294, 53, 204}, {878802328948, 656147994617, 617876871857}},
      {4294967295u, {419, 290, 12, 71, 948}, {53956357191, 922432766458, 547627168379}},
  };
  for (const Case& c : cases) {
    NumpyRandomState small(c.seed), large(c.seed);
    for (uint64_t expected : c.small) EXPECT_EQ(small.random_interval(1000), expected) << "seed " << c.seed;
    // Above 2^32 - 1 the draws are 64-bit, high word first.
    for (uint64_t expected : c.large) EXPECT_EQ(large.random_interval((uint64_t{1} << 40) + 4), expected) << "seed " << c.seed;
  }
  NumpyRandomState any(7);
  EXPECT_EQ(any.random_interval(0), 0u);
}

TEST(NumpyRandomState, ShuffleMatchesNumpy) {
  EXPECT_EQ(shuffled(0, 1), (std::vector<int32_t>{0}));
  EXPECT_EQ(shuffled(0, 2), (std::vector<int32_t>{1, 0}));
  EXPECT_EQ(shuffled(1234, 2), (std::vector<int32_t>{0, 1}));
  EXPECT_EQ(shuffled(0, 10), (std::vector<int32_t>{2, 8, 4, 9, 1, 6, 7, 3, 0, 5}));
  EXPECT_EQ(shuffled(1234, 10), (std::vector<int32_t>{7, 2, 9, 1, 0, 8, 4, 5, 6, 3}));
  EXPECT_EQ(shuffled(4294967295u, 10), (std::vector<int32_t>{6, 9, 5, 1, 8, 0, 7, 4, 2, 3}));
  // Two shuffles from one state, as Megatron's document then shuffle index:
  //   r = RandomState(1234); a = arange(1000, dtype=uint32); r.shuffle(a); b = arange(7); r.shuffle(b)
  NumpyRandomState random_state(1234);
  std::vector<uint32_t> first(1000);
  std::iota(first.begin(), first.end(), 0u);
  random_state.shuffle(std::span<uint32_t>(first));
  std::vector<int64_t> second(7);
  std::iota(second.begin(), second.end(), int64_t{0});
  random_state.shuffle(std::span<int64_t>(second));
  EXPECT_EQ(std::vector<uint32_t>(first.begin(), first.begin() + 8),
            (std::vector<uint32_t>{681, 990, 155, 768, 438, 363, 688, 555}));
  EXPECT_EQ(std::vector<uint32_t>(first.end() - 3, first.end()), (std::vector<uint32_t>{294, 723, 815}));
  EXPECT_EQ(second, (std::vector<int64_t>{4, 0, 1, 5, 6, 3, 2}));
}

}  // namespace
}  // namespace gpt
