// The element math and thresholds of S3R (s3r_math.h, int8_quantize.h): RTNE by hand, the
// exact floor(v + R) rule, the Δ/256 bias bound of the 7-bit half-step thresholds, the documented
// Philox counter layout, threshold sharing per token / per example, and TP/DP invariance.
#include "quant/s3r_math.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <set>
#include <vector>

#include "core/error.h"
#include "quant/int8_quantize.h"

namespace echo::quant {
namespace {

TEST(S3rMathTest, RtneByHand) {
  // inv_scale 1: ties go to the even neighbour; beyond the grid clamps to ±127 (never -128).
  const float x[] = {2.5f, -3.5f, 0.5f, -0.5f, 1.5f, 126.5f, 127.4f, 200.0f, -200.0f, 0.49f, -2.51f};
  const int expect[] = {2, -4, 0, 0, 2, 126, 127, 127, -127, 0, -3};
  for (size_t i = 0; i < std::size(x); ++i) EXPECT_EQ(quantize_rtne(x[i], 1.0f), expect[i]) << x[i];
  EXPECT_EQ(int8_scale(254.0f), 2.0f);
  EXPECT_EQ(int8_inv_scale(254.0f), 0.5f);
  EXPECT_EQ(quantize_rtne(5.0f, int8_inv_scale(254.0f)), 2);   // 2.5 -> 2
  EXPECT_EQ(quantize_rtne(-7.0f, int8_inv_scale(254.0f)), -4);  // -3.5 -> -4
  // An all-zero row: scale 1 keeps diag(s)^-1 finite; denormal-sized amax counts as zero.
  EXPECT_EQ(int8_scale(0.0f), 1.0f);
  EXPECT_EQ(int8_inv_scale(1e-35f), 1.0f);
  EXPECT_TRUE(std::isfinite(int8_inv_scale(kMinAmax)));
}

TEST(S3rMathTest, StochasticRuleIsExactFloorOfVPlusR) {
  std::mt19937 rng(3);
  std::uniform_real_distribution<float> d(-127.0f, 127.0f);
  for (int i = 0; i < 4000; ++i) {
    const float v = i < 8 ? float(i - 4) : d(rng);  // integers too: frac 0 never rounds up
    for (uint32_t code = 0; code < 128; ++code) {
      const float r = threshold_from_code(code);
      const double want = std::floor(double(v) + double(r));
      ASSERT_EQ(round_stochastic(v, r), std::max(-127.0, std::min(127.0, want))) << v << " " << r;
    }
  }
  EXPECT_EQ(round_stochastic(127.0f, threshold_from_code(127)), 127);   // clamps
  EXPECT_EQ(round_stochastic(-127.3f, threshold_from_code(0)), -127);
}

// Worst case of the 7-bit thresholds: v = n + f averaged over all 128 codes. The half-step shift
// makes the bias at most 1/256 (in Δ units) and exactly 1/256 at f = odd/256; R = k/128 without
// the shift would reach 1/128.
TEST(S3rMathTest, HalfStepThresholdBiasBoundedByDeltaOver256) {
  double worst = 0.0, worst_unshifted = 0.0;
  for (int n : {-100, -1, 0, 3, 90})
    for (int step = 0; step < 2048; ++step) {
      const float f = static_cast<float>(step) / 2048.0f;
      const float v = static_cast<float>(n) + f;
      double sum = 0.0, sum_unshifted = 0.0;
      for (uint32_t code = 0; code < 128; ++code) {
        sum += round_stochastic(v, threshold_from_code(code));
        sum_unshifted += round_stochastic(v, static_cast<float>(code) / 128.0f);
      }
      worst = std::max(worst, std::abs(sum / 128.0 - double(v)));
      worst_unshifted = std::max(worst_unshifted, std::abs(sum_unshifted / 128.0 - double(v)));
    }
  EXPECT_LE(worst, 1.0 / 256.0 + 1e-9);
  EXPECT_NEAR(worst, 1.0 / 256.0, 1e-9);
  EXPECT_NEAR(worst_unshifted, 1.0 / 128.0, 1e-3);  // what the test would see without the shift
}

// The counter layout documented in s3r_math.h, recomputed from Philox directly.
TEST(S3rMathTest, ThresholdCountersFollowTheDocumentedLayout) {
  ThresholdStream s{philox_key(0x1234'5678'9abcULL), 17, layer_site_word(5, 3), ThresholdSharing::per_token};
  EXPECT_EQ(s.layer_site, (5u << 8) | 3u);
  for (uint32_t token : {0u, 1u, 3u, 4u, 15u, 16u, 4095u, 123456u, 0xffffffffu}) {
    // per_token: 16 tokens per Philox call, four 7-bit codes cut from each 32-bit word.
    const auto w = philox4x32_10({{17, (5u << 8) | 3u, token / 16, 0u}}, s.key);
    EXPECT_EQ(threshold_code_per_token(s, token), (w.v[(token / 4) % 4] >> (8 * (token % 4))) & 0x7fu) << token;
    const auto we = philox4x32_10({{17, (5u << 8) | 3u, token, 0xffffffffu}}, s.key);
    EXPECT_EQ(threshold_code_per_example(s, token), we.v[0] & 0x7fu);
    for (uint32_t ch : {0u, 3u, 4u, 15u, 16u, 37u, 1000u}) {
      const auto wi = philox4x32_10({{17, (5u << 8) | 3u, token, 1u + ch / 16}}, s.key);
      EXPECT_EQ(threshold_code_independent(s, token, ch), (wi.v[(ch / 4) % 4] >> (8 * (ch % 4))) & 0x7fu);
    }
  }
  // The codes are uniform: every value appears, mean (k + 0.5)/128 near 1/2.
  std::set<uint32_t> seen;
  double mean = 0.0;
  const int n = 128 * 64;
  for (int t = 0; t < n; ++t) {
    const uint32_t c = threshold_code_per_token(s, t);
    seen.insert(c);
    mean += threshold_from_code(c) / n;
  }
  EXPECT_EQ(seen.size(), 128u);
  EXPECT_NEAR(mean, 0.5, 0.01);
}

// The per_token codes of consecutive tokens come from the bytes of shared Philox words: they must
// still be uniform over the 128 codes and independent of each other. Chi-square tests at about
// 5 sigma: the codes themselves (127 degrees of freedom), pairs of neighbouring tokens (which sit
// in one word or in adjacent words) binned by their top 3 bits (63 dof), and the threshold mean.
TEST(S3rMathTest, PerTokenThresholdsAreUniformAndIndependentAcrossTheWordsBytes) {
  for (uint64_t seed : {1u, 2u, 3u}) {
    const ThresholdStream s{philox_key(seed), 3, layer_site_word(1, 2), ThresholdSharing::per_token};
    const int n = 1 << 17;
    std::vector<uint32_t> code(n);
    for (int t = 0; t < n; ++t) code[t] = threshold_code_per_token(s, 1000 + t);
    std::vector<double> single(128, 0.0), pairs(64, 0.0);
    double mean = 0.0;
    for (int t = 0; t < n; ++t) {
      single[code[t]] += 1;
      mean += threshold_from_code(code[t]) / n;
    }
    for (int t = 0; t + 1 < n; t += 2) pairs[(code[t] >> 4) * 8 + (code[t + 1] >> 4)] += 1;
    auto chi2 = [](const std::vector<double>& counts, double expected) {
      double c = 0.0;
      for (double k : counts) c += (k - expected) * (k - expected) / expected;
      return c;
    };
    const double c1 = chi2(single, n / 128.0), c2 = chi2(pairs, n / 2 / 64.0);
    EXPECT_LT(c1, 127 + 5 * std::sqrt(2.0 * 127)) << "seed " << seed;
    EXPECT_GT(c1, 127 - 5 * std::sqrt(2.0 * 127)) << "seed " << seed << ": too regular";
    EXPECT_LT(c2, 63 + 5 * std::sqrt(2.0 * 63)) << "seed " << seed;
    // Mean of (k + 0.5) / 128 over uniform k is 1/2, with sd 0.289 / sqrt(n).
    EXPECT_NEAR(mean, 0.5, 5 * 0.289 / std::sqrt(double(n))) << "seed " << seed;
  }
}

// quantize_gradient's fast loops equal the single-element definition the kernels use.
TEST(S3rMathTest, QuantizeGradientMatchesElementDefinition) {
  const int64_t rows = 40, cols = 37, seq = 3;  // tokens 30..69 span several 16-token Philox groups
  std::mt19937 rng(11);
  std::uniform_real_distribution<float> d(-127.0f, 127.0f);
  std::vector<float> g(rows * cols);
  for (auto& v : g) v = d(rng);
  for (auto sharing : {ThresholdSharing::per_token, ThresholdSharing::per_example, ThresholdSharing::independent}) {
    GradientRounding rule{true, {philox_key(9), 4, layer_site_word(2, 1), sharing}, 30, 21, seq};
    std::vector<int8_t> q(rows * cols);
    std::vector<float> e(rows * cols);
    quantize_gradient(g.data(), rows, cols, 127.0f, rule, q.data(), e.data());
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t h = 0; h < cols; ++h) {
        const uint64_t token = 30 + t, ch = 21 + h;
        const float r = threshold_from_code(threshold_code(rule.stream, token, token / seq, ch));
        ASSERT_EQ(q[t * cols + h], round_stochastic(g[t * cols + h], r)) << int(sharing) << " " << t << " " << h;
        ASSERT_EQ(e[t * cols + h], float(q[t * cols + h]) - g[t * cols + h]);  // Δ = 1
      }
  }
}

// Every channel of token t sits at n_h + f_t: with per_token thresholds the whole token rounds in
// one direction (q - n_h is the same for all h), with per_example the whole example does, with
// independent thresholds the directions mix within a token.
TEST(S3rMathTest, SharedThresholdsRoundWholeGroupsTogether) {
  const int64_t rows = 64, cols = 48, seq = 8;
  std::vector<float> g(rows * cols);
  std::vector<int> base(cols);
  for (int64_t h = 0; h < cols; ++h) base[h] = static_cast<int>(h * 4) - 96;
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t h = 0; h < cols; ++h) g[t * cols + h] = static_cast<float>(base[h]) + 0.25f + 0.5f * (t % 2);
  auto directions = [&](ThresholdSharing sharing) {
    GradientRounding rule{true, {philox_key(5), 1, layer_site_word(0, 0), sharing}, 0, 0, seq};
    std::vector<int8_t> q(rows * cols);
    quantize_gradient(g.data(), rows, cols, 127.0f, rule, q.data(), nullptr);
    std::vector<std::set<int>> per_token(rows);
    for (int64_t t = 0; t < rows; ++t)
      for (int64_t h = 0; h < cols; ++h) per_token[t].insert(q[t * cols + h] - base[h]);
    return per_token;
  };
  int ups = 0;
  for (const auto& s : directions(ThresholdSharing::per_token)) {
    ASSERT_EQ(s.size(), 1u);  // one direction per token
    ups += *s.begin();
  }
  EXPECT_GT(ups, 0);
  EXPECT_LT(ups, rows);  // but tokens draw independently
  const auto ex = directions(ThresholdSharing::per_example);
  for (int64_t t = 0; t < rows; ++t) {
    ASSERT_EQ(ex[t].size(), 1u);
    // f = 0.25 and 0.75 alternate within an example: one threshold decides both consistently,
    // so a round-up at f = 0.25 implies a round-up at f = 0.75.
    if (t % 2 == 0 && *ex[t].begin() == 1) {
      EXPECT_EQ(*ex[t + 1].begin(), 1);
    }
  }
  int mixed = 0;
  for (const auto& s : directions(ThresholdSharing::independent)) mixed += s.size() > 1;
  EXPECT_GT(mixed, rows * 9 / 10);
}

// A column shard (channel_offset) and a DP/micro-batch slice (token_offset) draw exactly the
// thresholds of the full tensor, including shards that start inside a 16-channel Philox group.
TEST(S3rMathTest, ShardsDrawTheFullTensorsThresholds) {
  const int64_t rows = 12, cols = 48, seq = 3;
  std::mt19937 rng(21);
  std::uniform_real_distribution<float> d(-120.0f, 120.0f);
  std::vector<float> g(rows * cols);
  for (auto& v : g) v = d(rng);
  for (auto sharing : {ThresholdSharing::per_token, ThresholdSharing::per_example, ThresholdSharing::independent}) {
    const ThresholdStream stream{philox_key(77), 9, layer_site_word(3, 4), sharing};
    std::vector<int8_t> full(rows * cols);
    quantize_gradient(g.data(), rows, cols, 127.0f, {true, stream, 0, 0, seq}, full.data(), nullptr);
    const int64_t splits[][2] = {{0, 24}, {24, 24}, {0, 16}, {16, 16}, {32, 16}, {5, 13}, {18, 30}};
    for (const auto& sp : splits)
      for (int64_t r0 : {int64_t{0}, int64_t{6}}) {  // tokens [r0, r0 + 6): a whole-example slice
        const int64_t c0 = sp[0], nc = sp[1], nr = 6;
        std::vector<float> gs(nr * nc);
        for (int64_t t = 0; t < nr; ++t)
          for (int64_t h = 0; h < nc; ++h) gs[t * nc + h] = g[(r0 + t) * cols + c0 + h];
        std::vector<int8_t> qs(nr * nc);
        quantize_gradient(gs.data(), nr, nc, 127.0f, {true, stream, r0, c0, seq}, qs.data(), nullptr);
        for (int64_t t = 0; t < nr; ++t)
          for (int64_t h = 0; h < nc; ++h)
            ASSERT_EQ(qs[t * nc + h], full[(r0 + t) * cols + c0 + h])
                << "sharing " << int(sharing) << " shard at channel " << c0 << " token " << r0;
      }
  }
}

TEST(S3rMathTest, NonFiniteInputsAreErrors) {
  std::vector<float> x = {1.0f, NAN, 2.0f};
  float amax[1];
  EXPECT_THROW(row_absmax(x.data(), 1, 3, amax), Error);
  const float s[] = {1.0f, 1.0f, 1.0f};
  std::vector<float> out(3);
  x[1] = INFINITY;
  EXPECT_THROW(scale_gradient(x.data(), s, s, 1, 3, out.data()), Error);
}

}  // namespace
}  // namespace echo::quant
