// Philox4x32-10 against the Random123 known-answer vectors (kat_vectors), and the statistics of
// the uniform-float and 7-bit S3R threshold helpers built on it.
#include "core/philox.h"

#include <gtest/gtest.h>

#include <array>
#include <cmath>
#include <set>

namespace echo {
namespace {

struct Kat {
  PhiloxCounter ctr;
  PhiloxKey key;
  std::array<uint32_t, 4> expect;
};

TEST(PhiloxTest, Random123KnownAnswers) {
  const Kat kats[] = {
      {{{0x00000000u, 0x00000000u, 0x00000000u, 0x00000000u}},
       {{0x00000000u, 0x00000000u}},
       {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u}},
      {{{0xffffffffu, 0xffffffffu, 0xffffffffu, 0xffffffffu}},
       {{0xffffffffu, 0xffffffffu}},
       {0x408f276du, 0x41c83b0eu, 0xa20bc7c6u, 0x6d5451fdu}},
      {{{0x243f6a88u, 0x85a308d3u, 0x13198a2eu, 0x03707344u}},
       {{0xa4093822u, 0x299f31d0u}},
       {0xd16cfe09u, 0x94fdccebu, 0x5001e420u, 0x24126ea1u}},
  };
  for (const Kat& k : kats) {
    const PhiloxOutput out = philox4x32_10(k.ctr, k.key);
    for (int i = 0; i < 4; ++i)
      EXPECT_EQ(out.v[i], k.expect[i]) << "word " << i << " of ctr " << std::hex << k.ctr.v[0];
  }
}

TEST(PhiloxTest, MulhiloMatchesWideMultiply) {
  const uint32_t values[] = {0u, 1u, 0xffffffffu, kPhiloxM0, kPhiloxM1, 0x80000000u, 0x12345678u};
  for (uint32_t a : values) {
    for (uint32_t b : values) {
      uint32_t hi, lo;
      philox_mulhilo(a, b, hi, lo);
      const uint64_t p = static_cast<uint64_t>(a) * b;
      EXPECT_EQ((static_cast<uint64_t>(hi) << 32) | lo, p);
    }
  }
}

TEST(PhiloxTest, KeyFromSeedAndCounterSensitivity) {
  const PhiloxKey key = philox_key(0x0123456789abcdefull);
  EXPECT_EQ(key.v[0], 0x89abcdefu);
  EXPECT_EQ(key.v[1], 0x01234567u);
  // Neighbouring counters and keys give unrelated words (a one-bit change flips about half).
  const PhiloxOutput a = philox4x32_10({{1, 2, 3, 4}}, key);
  const PhiloxOutput b = philox4x32_10({{1, 2, 3, 5}}, key);
  const PhiloxOutput c = philox4x32_10({{1, 2, 3, 4}}, philox_key(0x0123456789abcdeeull));
  int flips_b = 0, flips_c = 0;
  for (int i = 0; i < 4; ++i) {
    flips_b += __builtin_popcount(a.v[i] ^ b.v[i]);
    flips_c += __builtin_popcount(a.v[i] ^ c.v[i]);
  }
  EXPECT_GT(flips_b, 40);
  EXPECT_LT(flips_b, 88);
  EXPECT_GT(flips_c, 40);
  EXPECT_LT(flips_c, 88);
}

TEST(PhiloxTest, UniformIsInUnitIntervalAndExactAtTheEnds) {
  EXPECT_EQ(philox_uniform(0u), 0.0f);
  EXPECT_EQ(philox_uniform(0xffffffffu), 1.0f - std::ldexp(1.0f, -24));
  EXPECT_LT(philox_uniform(0xffffffffu), 1.0f);
  EXPECT_EQ(philox_uniform(0x80000000u), 0.5f);
  EXPECT_EQ(philox_uniform(0x000000ffu), 0.0f);  // the low 8 bits are dropped

  const PhiloxKey key = philox_key(1234);
  double sum = 0.0, sum_sq = 0.0;
  constexpr int kCalls = 1 << 18;
  for (uint32_t i = 0; i < kCalls; ++i) {
    const PhiloxOutput out = philox4x32_10({{i, 0, 0, 0}}, key);
    for (uint32_t w : out.v) {
      const float u = philox_uniform(w);
      ASSERT_GE(u, 0.0f);
      ASSERT_LT(u, 1.0f);
      sum += u;
      sum_sq += static_cast<double>(u) * u;
    }
  }
  const double n = 4.0 * kCalls;
  const double mean = sum / n;
  const double var = sum_sq / n - mean * mean;
  // Standard error of the mean is sqrt(1/12 / 2^20) ~ 2.8e-4; allow about 7 of them.
  EXPECT_NEAR(mean, 0.5, 2e-3);
  EXPECT_NEAR(var, 1.0 / 12.0, 2e-3);
}

TEST(PhiloxTest, ThresholdBitPositions) {
  // Code j is bits [8j, 8j+6]; the top bit of each byte is ignored.
  const uint32_t word = 0x01020304u;
  EXPECT_EQ(s3r_threshold_code(word, 0), 4u);
  EXPECT_EQ(s3r_threshold_code(word, 1), 3u);
  EXPECT_EQ(s3r_threshold_code(word, 2), 2u);
  EXPECT_EQ(s3r_threshold_code(word, 3), 1u);
  EXPECT_EQ(s3r_threshold_code(0x80808080u, 0), 0u);
  EXPECT_EQ(s3r_threshold_code(0x80808080u, 3), 0u);
  EXPECT_EQ(s3r_threshold_code(0xffffffffu, 2), 127u);
  EXPECT_EQ(s3r_threshold_code(0x7f000000u, 3), 127u);
  EXPECT_EQ(s3r_threshold(0u, 0), 0.5f / 128.0f);
  EXPECT_EQ(s3r_threshold(0x7fu, 0), 127.5f / 128.0f);
  EXPECT_EQ(s3r_threshold(0x00004000u, 1), 64.5f / 128.0f);
  for (uint32_t k = 0; k < 128; ++k) {
    for (int j = 0; j < kThresholdsPerWord; ++j) {
      EXPECT_EQ(s3r_threshold(k << (8 * j), j), (static_cast<float>(k) + 0.5f) / 128.0f);
    }
  }
}

TEST(PhiloxTest, ThresholdStatistics) {
  const PhiloxKey key = philox_key(0x5eedull);
  std::array<int64_t, 128> counts{};
  double sum = 0.0;
  constexpr int kCalls = 1 << 16;  // 2^16 calls x 4 words x 4 thresholds = 2^20 thresholds
  for (uint32_t i = 0; i < kCalls; ++i) {
    // The S3R counter layout: (step, layer, site, token index).
    const PhiloxOutput out = philox4x32_10({{7, 3, 1, i}}, key);
    for (uint32_t w : out.v) {
      for (int j = 0; j < kThresholdsPerWord; ++j) {
        const float r = s3r_threshold(w, j);
        ASSERT_GT(r, 0.0f);
        ASSERT_LT(r, 1.0f);
        sum += r;
        ++counts[s3r_threshold_code(w, j)];
      }
    }
  }
  const double n = 16.0 * kCalls;
  EXPECT_NEAR(sum / n, 0.5, 2e-3);
  // Every code occurs, with counts consistent with uniformity (chi-square, 127 d.o.f.; the
  // 99.99% quantile is about 198).
  const double expected = n / 128.0;
  double chi2 = 0.0;
  for (int64_t c : counts) {
    EXPECT_GT(c, 0);
    chi2 += (c - expected) * (c - expected) / expected;
  }
  EXPECT_LT(chi2, 198.0);
}

}  // namespace
}  // namespace echo
