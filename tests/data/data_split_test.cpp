// is_valid_document: the document-level train/valid split is stable, near the requested fraction,
// keyed by the seed, and monotone in the fraction.
#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <cmath>

#include "core/error.h"
#include "data/split.h"

namespace echo::data {
namespace {

TEST(DataSplitTest, FractionIsNearTheRequestedOne) {
  constexpr int kDocs = 20000;
  for (double fraction : {0.01, 0.1, 0.5}) {
    int valid = 0;
    for (uint64_t d = 0; d < kDocs; ++d) valid += is_valid_document(d, fraction, 1234);
    const double sigma = std::sqrt(kDocs * fraction * (1 - fraction));
    EXPECT_NEAR(valid, kDocs * fraction, 4.5 * sigma) << "fraction " << fraction;
  }
  for (uint64_t d = 0; d < 1000; ++d) {
    EXPECT_FALSE(is_valid_document(d, 0.0, 7));
    EXPECT_TRUE(is_valid_document(d, 1.0, 7));
  }
}

TEST(DataSplitTest, StableKeyedAndMonotone) {
  int differ = 0, both = 0;
  for (uint64_t d = 0; d < 20000; ++d) {
    const bool v = is_valid_document(d, 0.1, 42);
    EXPECT_EQ(v, is_valid_document(d, 0.1, 42));  // same answer every time
    if (v) {
      EXPECT_TRUE(is_valid_document(d, 0.2, 42)) << "a larger fraction only adds documents";
    }
    const bool w = is_valid_document(d, 0.1, 43);
    differ += v != w;
    both += v && w;
  }
  // Independent splits under seeds 42 and 43: about 2 * 0.1 * 0.9 = 18% differ, 1% in both.
  EXPECT_NEAR(differ, 3600, 400);
  EXPECT_NEAR(both, 200, 90);
  // Indices above 2^32 use the high word too.
  int high_differ = 0;
  for (uint64_t d = 0; d < 2000; ++d)
    high_differ += is_valid_document(d, 0.5, 1) != is_valid_document(d + (uint64_t{1} << 32), 0.5, 1);
  EXPECT_NEAR(high_differ, 1000, 150);
}

TEST(DataSplitTest, RejectsBadFraction) {
  EXPECT_THROW(is_valid_document(0, -0.1, 1), echo::Error);
  EXPECT_THROW(is_valid_document(0, 1.5, 1), echo::Error);
  try {
    is_valid_document(0, 1.5, 1);
  } catch (const echo::Error& e) {
    EXPECT_THAT(e.message(), ::testing::HasSubstr("valid_fraction must be in [0, 1], got 1.5"));
  }
}

}  // namespace
}  // namespace echo::data
