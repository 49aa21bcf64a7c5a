// Site -> layer -> bits, and the backward rescale exponent.
#include "comm/echo/bit_policy.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <random>

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

// Every finite gmax, down to the smallest denormal (e = 159) and up to FLT_MAX (e = -117):
// scale_pow2 puts gmax into [2^10, 2^11), equals ldexpf, and scaling back returns every value of
// the group bit for bit (a precomputed 2^e is inf for e > 127, and 0·inf is NaN).
TEST(Rescale, ScalingIsExactForEveryFiniteMagnitude) {
  const float gmaxes[] = {std::numeric_limits<float>::denorm_min(),
                          1e-40f,
                          std::ldexp(1.0f, -120),
                          std::ldexp(1.0f, -117),
                          std::ldexp(1.0f, -118),
                          std::numeric_limits<float>::min(),
                          1.0f,
                          std::ldexp(1.0f, 100),
                          std::numeric_limits<float>::max()};
  std::mt19937 gen(3);
  std::uniform_real_distribution<float> unit(-1.0f, 1.0f);
  for (float gmax : gmaxes) {
    const int e = rescale_exponent(gmax);
    const float top = scale_pow2(gmax, e);
    EXPECT_GE(top, 1024.0f) << gmax;
    EXPECT_LT(top, 2048.0f) << gmax;
    EXPECT_EQ(scale_pow2(top, -e), gmax) << gmax;
    EXPECT_EQ(scale_pow2(0.0f, e), 0.0f) << gmax;
    for (int i = 0; i < 2000; ++i) {
      const float x = unit(gen) * gmax;  // rounded to the denormal grid where gmax is tiny
      const float up = scale_pow2(x, e);
      ASSERT_EQ(up, std::ldexp(x, e)) << x << " e=" << e;
      ASSERT_EQ(scale_pow2(up, -e), x) << x << " e=" << e;
    }
  }
  EXPECT_EQ(rescale_exponent(std::numeric_limits<float>::denorm_min()), 159);
  EXPECT_EQ(rescale_exponent(std::ldexp(1.0f, -120)), 130);
  EXPECT_EQ(rescale_exponent(std::numeric_limits<float>::max()), -117);
  // Results below the normal range round once, as ldexpf does.
  EXPECT_EQ(scale_pow2(1.75f, -149), std::ldexp(1.75f, -149));
  EXPECT_EQ(scale_pow2(1.5f, -149), std::ldexp(1.5f, -149));
}

// The max that picks e: |v| by its bits, a NaN or infinity of either sign as +inf (a NaN's bits
// would order above +inf and MPI_MAX need not carry it), -0 as 0; the bits order like the values,
// so the kernels' atomicMax on them is the max.
TEST(Rescale, AbsmaxTakesMagnitudesAndNonFiniteAsInfinity) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  EXPECT_EQ(absmax_bits(-0.0f), 0u);
  EXPECT_EQ(absmax_bits(-3.5f), float_bits(3.5f));
  EXPECT_EQ(absmax_bits(std::numeric_limits<float>::denorm_min()), 1u);
  EXPECT_EQ(absmax_bits(-std::numeric_limits<float>::max()), float_bits(std::numeric_limits<float>::max()));
  for (float v : {inf, -inf, nan, -nan, bits_float(0x7f800001u), bits_float(0xffc00123u)})
    EXPECT_EQ(absmax_bits(v), float_bits(inf)) << float_bits(v);
  std::mt19937 gen(11);
  std::uniform_real_distribution<float> unit(-1e6f, 1e6f);
  float acc = 0.0f;
  uint32_t acc_bits = 0;
  double want = 0.0;
  for (int i = 0; i < 10000; ++i) {
    const float v = unit(gen);
    acc = absmax_step(acc, v);
    acc_bits = std::max(acc_bits, absmax_bits(v));
    want = std::max(want, std::fabs(static_cast<double>(v)));
  }
  EXPECT_EQ(static_cast<double>(acc), want);
  EXPECT_EQ(float_bits(acc), acc_bits);
  EXPECT_EQ(absmax_step(acc, nan), inf);
}

}  // namespace echo::comm
