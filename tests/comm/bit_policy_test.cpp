// Site -> layer -> bits, and the backward rescale exponent.
#include <gtest/gtest.h>

#include <cmath>
#include <random>

#include "comm/echo/bit_policy.h"
#include "comm/echo/rescale.h"
#include "core/error.h"

namespace echo::comm {

TEST(BitPolicy, UniformWidths) {
  for (int bits : {4, 8}) {
    BitPolicy p{bits, false, 3};
    for (int k = 0; k < 6; ++k) {
      EXPECT_EQ(p.bits_for({k, Direction::forward}), bits);
      EXPECT_EQ(p.bits_for({k, Direction::backward}), bits);
    }
  }
}

TEST(BitPolicy, EarlySite8BitPromotesTheFirstHalfOfTheLayersInBothDirections) {
  BitPolicy p{4, true, 4};  // 8 sites per pass, layers 0 and 1 are early
  const int fwd[8] = {8, 8, 8, 8, 4, 4, 4, 4};
  const int bwd[8] = {4, 4, 4, 4, 8, 8, 8, 8};  // backward visits layer 3 first
  for (int k = 0; k < 8; ++k) {
    EXPECT_EQ(p.bits_for({k, Direction::forward}), fwd[k]) << "forward site " << k;
    EXPECT_EQ(p.bits_for({k, Direction::backward}), bwd[k]) << "backward site " << k;
  }
  EXPECT_EQ(p.layer_of({0, Direction::backward}), 3);
  EXPECT_EQ(p.layer_of({7, Direction::backward}), 0);
}

TEST(BitPolicy, SiteOutsideTheModelIsAnError) {
  BitPolicy p{4, true, 2};
  try {
    p.bits_for({4, Direction::forward});
    FAIL() << "expected an error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("forward site 4 is outside the 4 sites of a 2-layer model"), std::string::npos)
        << e.what();
  }
}

TEST(Rescale, ExponentPutsTheMaxInto2To10_2To11) {
  std::mt19937 gen(7);
  std::uniform_real_distribution<float> log2mag(-40.0f, 30.0f);
  for (int i = 0; i < 100000; ++i) {
    const float gmax = std::exp2(log2mag(gen));
    const int e = rescale_exponent(gmax);
    const double scaled = std::ldexp(static_cast<double>(gmax), e);
    ASSERT_GE(scaled, 1024.0) << gmax;
    ASSERT_LT(scaled, 2048.0) << gmax;
  }
  EXPECT_EQ(rescale_exponent(1024.0f), 0);
  EXPECT_EQ(rescale_exponent(2047.9f), 0);
  EXPECT_EQ(rescale_exponent(2048.0f), -1);
  EXPECT_EQ(rescale_exponent(1.0f), 10);
  EXPECT_EQ(rescale_exponent(0.0f), 0);
}

}  // namespace echo::comm
