// Benchmark message sizes: nccl-tests spellings parse to the expected byte counts, and bad
// sizes (negative, overflowing, beyond the caller's maximum) are refused with a message naming
// them instead of wrapping around into a list that grows until memory runs out.
#include "apps/bench/sizes.h"

#include <fmt/format.h>
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "../support/test_util.h"

namespace echo::bench {
namespace {

using echo::testing::error_of;
constexpr size_t kGiB = size_t{1} << 30;

TEST(Sizes, ParsesSuffixesRangesAndLists) {
  EXPECT_EQ(parse_size("256M"), 268435456u);
  EXPECT_EQ(parse_size("3k"), 3072u);
  EXPECT_EQ(parse_size("7"), 7u);
  EXPECT_EQ(parse_sizes("64K..1M", 4), (std::vector<size_t>{65536, 262144, 1048576}));
  EXPECT_EQ(parse_sizes("1K..3K", 2), (std::vector<size_t>{1024, 2048}));  // stops below hi
  EXPECT_EQ(parse_sizes("1K,4K,1M"), (std::vector<size_t>{1024, 4096, 1048576}));
  EXPECT_EQ(format_size(parse_size("16G")), "16G");
}

TEST(Sizes, RangeEndingAtTheMaximumStopsThere) {
  const auto sizes = parse_sizes("1K..1G", 2, kGiB, "the limit");
  ASSERT_EQ(sizes.size(), 21u);
  EXPECT_EQ(sizes.back(), kGiB);
}

TEST(Sizes, RangeUpToTheLargest64BitValueDoesNotWrapAround) {
  // Doubling from 1 reaches 2^63 and must stop there; the old loop wrapped to 0 and never ended.
  const auto sizes = parse_sizes("1..18446744073709551615", 2);
  ASSERT_EQ(sizes.size(), 64u);
  EXPECT_EQ(sizes.back(), size_t{1} << 63);
}

TEST(Sizes, RefusesSizesBeyondTheMaximumNamingIt) {
  const std::string msg = error_of([] { parse_sizes("1K..18446744073709551615", 2, kGiB, "echo_bench's limit"); });
  EXPECT_NE(msg.find("'18446744073709551615' exceeds echo_bench's limit, 1073741824 bytes (1G)"), std::string::npos)
      << msg;
  EXPECT_NE(error_of([] { parse_size("2G", kGiB, "the limit"); }).find("'2G' exceeds the limit"), std::string::npos);
}

TEST(Sizes, RefusesValuesThatOverflow64Bits) {
  EXPECT_NE(error_of([] { parse_size("18446744073709551616"); }).find("exceeds"), std::string::npos);
  EXPECT_NE(error_of([] { parse_size("99999999999999999999999"); }).find("exceeds"), std::string::npos);
  EXPECT_NE(error_of([] { parse_size("17179869184G"); }).find("exceeds"), std::string::npos);  // 2^34 GiB = 2^64
}

TEST(Sizes, RefusesNegativeZeroAndMalformedSizesInWords) {
  EXPECT_EQ(error_of([] { parse_size("-4K"); }), "size '-4K' must be positive");
  EXPECT_EQ(error_of([] { parse_sizes("-4K..1M"); }), "size '-4K' must be positive");
  EXPECT_EQ(error_of([] { parse_size("0K"); }), "size '0K' must be positive");
  EXPECT_NE(error_of([] { parse_size(" 4K"); }).find("is not a size"), std::string::npos);
  EXPECT_NE(error_of([] { parse_size("+4K"); }).find("is not a size"), std::string::npos);
  EXPECT_NE(error_of([] { parse_size("4T"); }).find("unknown size suffix 'T'"), std::string::npos);
  EXPECT_NE(error_of([] { parse_sizes("1M..1K"); }).find("runs backwards"), std::string::npos);
  EXPECT_NE(error_of([] { parse_sizes("1K..1M", 1); }).find("step factor must be >= 2"), std::string::npos);
}

TEST(Sizes, RefusesEmptyEndsAndEntriesNamingTheWholeSpec) {
  for (const char* spec : {"1K..", "..1K", "..", "1K..2K..4K"})
    EXPECT_EQ(error_of([&] { parse_sizes(spec); }),
              fmt::format("size range '{}' needs one size on each side of '..' (e.g. 1M..256M)", spec));
  for (const char* spec : {"1,,2", ",1", "1,", ""})
    EXPECT_EQ(error_of([&] { parse_sizes(spec); }),
              fmt::format("size list '{}' has an empty entry (sizes are separated by single commas, e.g. 1K,4K,1M)",
                          spec));
}

TEST(Sizes, RefusesAnOddByteCountOfA16BitMessage) {
  EXPECT_NO_THROW(require_16bit_values(parse_sizes("2,4K,1M"), "--sizes"));
  EXPECT_EQ(error_of([] { require_16bit_values(parse_sizes("4K,3"), "--sizes"); }),
            "--sizes: 3 bytes is not a whole number of 16-bit values (sizes are bytes of a bf16 message); give an "
            "even size");
  EXPECT_NE(error_of([] { require_16bit_values(parse_sizes("1..64"), "--sizes"); }).find("--sizes: 1 bytes"),
            std::string::npos);
}

}  // namespace
}  // namespace echo::bench
