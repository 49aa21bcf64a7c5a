// core/seconds_text.h: a duration in a message keeps what tells it apart (a sub-second timeout
// is not "0 s") and a long one reads as whole seconds.
#include "core/seconds_text.h"

#include <gtest/gtest.h>

namespace echo {
namespace {

TEST(SecondsText, ThreeSignificantDigitsBelowAThousandSeconds) {
  EXPECT_EQ(seconds_text(0.001), "0.001");
  EXPECT_EQ(seconds_text(0.0123456), "0.0123");
  EXPECT_EQ(seconds_text(1.25), "1.25");
  EXPECT_EQ(seconds_text(600), "600");
  EXPECT_EQ(seconds_text(0), "0");
}

TEST(SecondsText, WholeSecondsFromAThousandOn) {
  EXPECT_EQ(seconds_text(1234.56), "1235");
  EXPECT_EQ(seconds_text(999.7), "1000");  // not 1e+03
  EXPECT_EQ(seconds_text(86400), "86400");
}

}  // namespace
}  // namespace echo
