// The compensator's element math (compensator_math.h) rounds every operation once, in the
// order Eqns. (10)-(11) write it: the reference evaluates each operation in double and rounds
// it to fp32 (exact for +, -, ·, / of floats: double has more than 2·24 + 2 bits), so a build
// that fused a·b + c into an FMA (nvcc by default, GCC with -mfma) would differ here.
#include "comm/echo/compensator_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <random>

namespace echo::comm {
namespace {

// Rounds to fp32 through a volatile, so that not even a build with contraction on can fuse the
// reference's own operations (GCC narrows float(double(a) * double(b)) back to a float multiply).
float r(double v) {
  volatile float f = static_cast<float>(v);
  return f;
}

float reference_compensate(float x, float m1, float m2, const CompensatorCoeffs& k) {
  const float blend = r(double(r(double(k.a) * m1)) + double(r(double(r(1.0 - k.a)) * m2)));
  return r(double(x) + double(r(double(k.eta) * blend)));
}

float reference_update(float x_comp, float y, float p, float& m1, float& m2, const CompensatorCoeffs& k) {
  const float u = r(double(x_comp) - double(r(double(y) / p)));
  m1 = r(double(r(double(k.beta1) * m1)) + double(r(double(r(1.0 - k.beta1)) * u)));
  m2 = r(double(r(double(k.beta2) * m2)) + double(r(double(r(1.0 - k.beta2)) * u)));
  return u;
}

bool same_bits(float a, float b) { return std::memcmp(&a, &b, sizeof a) == 0; }

TEST(CompensatorMath, EveryOperationIsRoundedOnce) {
  std::mt19937 gen(5);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::uniform_real_distribution<float> unit(0.0f, 1.0f);
  std::uniform_int_distribution<int> octave(-30, 30);
  auto value = [&] { return std::ldexp(n01(gen), octave(gen)); };
  for (int i = 0; i < 200000; ++i) {
    CompensatorCoeffs k;
    if (i % 2) k = {unit(gen), unit(gen), 0.99f * unit(gen), 0.99f * unit(gen)};
    const float x = value(), m1 = value(), m2 = value(), y = value();
    const float p = static_cast<float>(1 + i % 8);
    ASSERT_TRUE(same_bits(compensate(x, m1, m2, k), reference_compensate(x, m1, m2, k))) << i;
    float a1 = m1, a2 = m2, b1 = m1, b2 = m2;
    const float u = compensator_update(x, y, p, a1, a2, k), v = reference_update(x, y, p, b1, b2, k);
    ASSERT_TRUE(same_bits(u, v) && same_bits(a1, b1) && same_bits(a2, b2)) << i;
  }
}

// The slow average is m1 (β1 = 0.7 keeps 70 % per site), the fast one m2 (β2 = 0.3): after one
// unit residual and then zeros, m1 decays as 0.3·0.7^t and m2 as 0.7·0.3^t.
TEST(CompensatorMath, Beta1IsTheSlowAverage) {
  const CompensatorCoeffs k;
  float m1 = 0.0f, m2 = 0.0f;
  compensator_update(1.0f, 0.0f, 1.0f, m1, m2, k);
  EXPECT_FLOAT_EQ(m1, 0.3f);
  EXPECT_FLOAT_EQ(m2, 0.7f);
  for (int t = 0; t < 3; ++t) compensator_update(0.0f, 0.0f, 1.0f, m1, m2, k);
  EXPECT_NEAR(m1, 0.3 * std::pow(0.7, 3), 1e-7);
  EXPECT_NEAR(m2, 0.7 * std::pow(0.3, 3), 1e-7);
  EXPECT_GT(m1, m2);
}

}  // namespace
}  // namespace echo::comm
