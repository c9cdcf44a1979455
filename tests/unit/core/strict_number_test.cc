// Regression tests for issue 16's numbers: flags are decimal (no octal, no hex), overflow is an
// error rather than a clamp, inf / nan / hex floats / 1e400 are refused; sizes derived from them
// use overflow-checked arithmetic.
#include <cstdint>
#include <limits>
#include <string>

#include "core/checked_math.h"
#include "core/strict_number.h"
#include "gtest/gtest.h"

namespace gpt {
namespace {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

TEST(StrictNumber, IntegersAreDecimal) {
  EXPECT_EQ(*parse_decimal_integer("010"), 10);  // not octal 8
  EXPECT_EQ(*parse_decimal_integer("0042"), 42);  // not octal 34
  EXPECT_EQ(*parse_decimal_integer("+7"), 7);
  EXPECT_EQ(*parse_decimal_integer("-0"), 0);
  EXPECT_EQ(*parse_decimal_integer("9223372036854775807"), kMax);
  EXPECT_EQ(*parse_decimal_integer("-9223372036854775808"), kMin);
  for (const char* bad : {"", " 5", "5 ", "0x10", "0X10", "1e3", "1.0", "inf", "nan", "--5", "+", "-", "5k", "0b101",
                          "١٢"}) {
    EXPECT_FALSE(parse_decimal_integer(bad).ok()) << "'" << bad << "'";
  }
}

TEST(StrictNumber, IntegerOverflowIsAnErrorNotAClamp) {
  for (const char* big : {"9223372036854775808", "99999999999999999999", "-9223372036854775809",
                          "100000000000000000000000000000000000000000"}) {
    const auto parsed = parse_decimal_integer(big);
    ASSERT_FALSE(parsed.ok()) << big;
    EXPECT_NE(std::string(parsed.status().message()).find("out of range"), std::string::npos) << parsed.status();
  }
  EXPECT_FALSE(parse_decimal_integer("0", 1, 10).ok());
  EXPECT_FALSE(parse_decimal_integer("11", 1, 10).ok());
  EXPECT_EQ(*parse_decimal_integer("10", 1, 10), 10);
}

TEST(StrictNumber, FloatsAreFiniteDecimal) {
  EXPECT_DOUBLE_EQ(*parse_finite_number("1e-3"), 1e-3);
  EXPECT_DOUBLE_EQ(*parse_finite_number(".5"), 0.5);
  EXPECT_DOUBLE_EQ(*parse_finite_number("5."), 5.0);
  EXPECT_DOUBLE_EQ(*parse_finite_number("-2.5E+2"), -250.0);
  EXPECT_DOUBLE_EQ(*parse_finite_number("010"), 10.0);
  EXPECT_DOUBLE_EQ(*parse_finite_number("1e308"), 1e308);
  EXPECT_EQ(*parse_finite_number("1e-400"), 0.0);  // below the range rounds towards zero, as strtod
  for (const char* bad : {"", "inf", "-inf", "infinity", "nan", "NaN", "0x1p3", "1e400", "-1e400", "1e", "e5", ".",
                          "1.2.3", " 1", "1 ", "1e99999999999999999999"}) {
    EXPECT_FALSE(parse_finite_number(bad).ok()) << "'" << bad << "'";
  }
}

// Issue 44: a range check that NaN cannot slip through (CLI11's Range lets it pass), and messages
// that say the range as a user writes it (CLI11's printed a 309-digit bound).
TEST(StrictNumber, RangesRefuseNaNAndSayTheRangeReadably) {
  EXPECT_DOUBLE_EQ(*parse_number_in("0.5", NumberRange::from_to(0, 1)), 0.5);
  EXPECT_DOUBLE_EQ(*parse_number_in("0", NumberRange::from_to(0, 1)), 0.0);
  EXPECT_DOUBLE_EQ(*parse_number_in("1", NumberRange::from_to(0, 1)), 1.0);
  EXPECT_EQ(parse_number_in("1.5", NumberRange::from_to(0, 1)).status().message(), "must be from 0 to 1 (got 1.5)");
  EXPECT_EQ(parse_number_in("0", NumberRange::above(0, 1e6)).status().message(),
            "must be above 0 and at most 1e6 (got 0)");
  EXPECT_EQ(parse_number_in("-1", NumberRange::from_to(0, 1e12)).status().message(),
            "must be from 0 to 1e12 (got -1)");
  EXPECT_FALSE(parse_number_in("nan", NumberRange::from_to(0, 1)).ok());
  EXPECT_FALSE(parse_number_in("1e400", NumberRange{}).ok());
  constexpr double kNaN = std::numeric_limits<double>::quiet_NaN(), kInf = std::numeric_limits<double>::infinity();
  EXPECT_EQ(check_number(kNaN, NumberRange::from_to(0, 1)).message(), "must be from 0 to 1 (got nan)");
  EXPECT_FALSE(check_number(kInf, NumberRange{}).ok());
  EXPECT_FALSE(check_number(-kInf, NumberRange{}).ok());
  EXPECT_EQ(check_number(kInf, NumberRange{}).message(), "must be finite (got inf)");
  EXPECT_EQ(check_number(-2, NumberRange{0, std::numeric_limits<double>::max(), false}).message(),
            "must be at least 0 (got -2)");
  EXPECT_TRUE(check_number(1e308, NumberRange{}).ok());
  EXPECT_EQ(number_text(1e-5), "1e-5");
  EXPECT_EQ(number_text(2.5e300), "2.5e300");
  EXPECT_EQ(number_text(1048576), "1048576");
  EXPECT_EQ(number_text(0.1), "0.1");
  EXPECT_EQ(number_text(1.0 / 3), "0.3333333333333333");
  // No message has a bound longer than %g's few digits.
  for (const NumberRange& range : {NumberRange{}, NumberRange::from_to(0, std::numeric_limits<double>::max()),
                                   NumberRange::above(-std::numeric_limits<double>::max(), 1e308)}) {
    EXPECT_LT(check_number(kNaN, range).message().size(), 60u) << check_number(kNaN, range).message();
  }
}

TEST(CheckedMath, ProductsAndRoundingThatOverflowAreNullopt) {
  EXPECT_EQ(checked_multiply(int64_t{1} << 31, int64_t{1} << 31), int64_t{1} << 62);
  EXPECT_FALSE(checked_multiply(int64_t{1} << 32, int64_t{1} << 31));
  EXPECT_FALSE(checked_multiply(kMin, -1));
  EXPECT_FALSE(checked_add(kMax, 1));
  EXPECT_EQ(checked_product(2, 3, 4, 5), 120);
  EXPECT_FALSE(checked_product(int64_t{1} << 40, int64_t{1} << 20, 8));
  // The padded vocabulary of --make-vocab-size-divisible-by 2^62: 2^62 fits, 2^62 + 1 rounds to 2^63.
  EXPECT_EQ(checked_round_up(512, int64_t{1} << 62), int64_t{1} << 62);
  EXPECT_FALSE(checked_round_up((int64_t{1} << 62) + 1, int64_t{1} << 62));
  EXPECT_EQ(checked_round_up(50257, 128), 50304);
  EXPECT_EQ(checked_round_up(0, 128), 0);
  EXPECT_FALSE(checked_round_up(-1, 128));
  EXPECT_FALSE(checked_round_up(5, 0));
}

}  // namespace
}  // namespace gpt
