// Checks core/half.h against references written independently of it: the compiler's _Float16
// (float -> _Float16 rounds to nearest even) and a double-precision rounding model for both
// fp16 and bf16 that uses nearbyint on an exactly scaled value.
#include "core/half.h"

#include <gtest/gtest.h>

#include <cfenv>
#include <cmath>
#include <cstring>
#include <random>
#include <vector>

namespace echo {
namespace {

#if defined(__FLT16_MAX__)
constexpr bool kHaveFloat16 = true;
uint16_t compiler_float_to_half(float f) {
  const _Float16 h = static_cast<_Float16>(f);
  uint16_t bits;
  std::memcpy(&bits, &h, sizeof bits);
  return bits;
}
float compiler_half_to_float(uint16_t bits) {
  _Float16 h;
  std::memcpy(&h, &bits, sizeof h);
  return static_cast<float>(h);
}
#else
constexpr bool kHaveFloat16 = false;
uint16_t compiler_float_to_half(float) { return 0; }
float compiler_half_to_float(uint16_t) { return 0.0f; }
#endif

bool half_is_nan(uint16_t h) { return (h & 0x7c00u) == 0x7c00u && (h & 0x03ffu) != 0; }
bool bf16_is_nan(uint16_t h) { return (h & 0x7f80u) == 0x7f80u && (h & 0x007fu) != 0; }

// Rounds |x| to a grid of `mant_bits` fraction bits with exponent floor(log2|x|) but never below
// `min_exp` (the subnormal range shares min_exp's spacing), ties to even. Exact: x is a float,
// so x / ulp is a power-of-two scaling that double holds exactly, and nearbyint rounds to even.
double round_to_grid(double a, int mant_bits, int min_exp) {
  int e;
  std::frexp(a, &e);  // a = m * 2^e, m in [0.5, 1): floor(log2 a) = e - 1
  const double ulp = std::ldexp(1.0, std::max(e - 1, min_exp) - mant_bits);
  return std::nearbyint(a / ulp) * ulp;
}

// Independent fp32 -> binary16 model (1 sign, 5 exponent, 10 fraction bits, bias 15).
uint16_t reference_float_to_half(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
  if (std::isnan(f)) return sign | 0x7e00u;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return sign | 0x7c00u;
  if (a == 0.0) return sign;
  const double v = round_to_grid(a, 10, -14);
  if (v > 65504.0) return sign | 0x7c00u;
  if (v < std::ldexp(1.0, -14)) return sign | static_cast<uint16_t>(std::ldexp(v, 24));  // subnormal: v / 2^-24
  int e;
  std::frexp(v, &e);
  const int exp = e - 1;
  const auto frac = static_cast<uint16_t>(std::ldexp(v, 10 - exp) - 1024.0);
  return sign | static_cast<uint16_t>((exp + 15) << 10) | frac;
}

// Independent binary16 -> double decode.
double reference_half_to_double(uint16_t h) {
  const double s = (h & 0x8000u) ? -1.0 : 1.0;
  const int exp = (h >> 10) & 0x1f;
  const int frac = h & 0x3ff;
  if (exp == 0x1f) return frac ? std::nan("") : s * INFINITY;
  if (exp == 0) return s * std::ldexp(frac, -24);
  return s * std::ldexp(1024 + frac, exp - 25);
}

// Independent fp32 -> bfloat16 model (1 sign, 8 exponent, 7 fraction bits, fp32's range).
uint16_t reference_float_to_bf16(float f) {
  const uint16_t sign = std::signbit(f) ? 0x8000u : 0u;
  if (std::isnan(f)) return sign | 0x7fc0u;
  const double a = std::fabs(static_cast<double>(f));
  if (std::isinf(a)) return sign | 0x7f80u;
  if (a == 0.0) return sign;
  const double v = round_to_grid(a, 7, -126);
  if (v >= std::ldexp(1.0, 128)) return sign | 0x7f80u;
  uint32_t u;
  const float vf = static_cast<float>(v);  // exact: v has at most 8 significant bits in fp32 range
  std::memcpy(&u, &vf, sizeof u);
  EXPECT_EQ(u & 0xffffu, 0u);
  return sign | static_cast<uint16_t>(u >> 16);
}

// A mix of bit patterns that stresses both conversions: fully random words, values whose
// exponent lies where fp16 is interesting (subnormals to overflow), ties and near-ties of the
// fp16 and bf16 grids, and fp32 subnormals.
std::vector<uint32_t> test_patterns(size_t n, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::vector<uint32_t> out;
  out.reserve(n);
  for (size_t i = 0; i < n; ++i) {
    const uint32_t r = static_cast<uint32_t>(rng());
    const uint32_t sign = r & 0x80000000u;
    const uint32_t mant = static_cast<uint32_t>(rng() >> 41);  // 23 random bits
    switch (i % 8) {
      case 0:
      case 1:
      case 2:
        out.push_back(r);
        break;   // anything, NaN and Inf included
      case 3: {  // exponent 2^-26 .. 2^16: fp16's subnormals, normals and overflow
        const uint32_t exp = 101 + static_cast<uint32_t>(rng() % 43);
        out.push_back(sign | (exp << 23) | mant);
        break;
      }
      case 4: {  // an fp16 tie: the 13 dropped bits are exactly half an ulp (or near it)
        const uint32_t exp = 103 + static_cast<uint32_t>(rng() % 40);
        const uint32_t delta = static_cast<uint32_t>(rng() % 3) - 1;  // -1, 0, +1
        out.push_back(sign | (exp << 23) | (((mant & ~0x1fffu) | 0x1000u) + delta));
        break;
      }
      case 5: {  // a bf16 tie: the 16 dropped bits are exactly half an ulp (or near it)
        const uint32_t delta = static_cast<uint32_t>(rng() % 3) - 1;
        out.push_back(((r & 0xffff0000u) | 0x8000u) + delta);
        break;
      }
      case 6:
        out.push_back(sign | mant);
        break;   // fp32 subnormals
      case 7: {  // fp16's subnormal range: (k + 0.5) * 2^-24, a tie, or a float next to it
        const float tie = (static_cast<float>(rng() % 1024) + 0.5f) * 5.9604644775390625e-08f;
        const uint32_t delta = static_cast<uint32_t>(rng() % 3) - 1;
        out.push_back(sign | (float_bits(tie) + delta));
        break;
      }
    }
  }
  return out;
}

constexpr size_t kNumRandom = 10'000'000;

class HalfTest : public ::testing::Test {
 protected:
  void SetUp() override { ASSERT_EQ(std::fegetround(), FE_TONEAREST); }
};

TEST_F(HalfTest, AllHalfPatternsRoundTripAndDecodeExactly) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = half_bits_to_float(h);
    const double expect = reference_half_to_double(h);
    const uint16_t back = float_to_half_bits(f);
    if (half_is_nan(h)) {
      ASSERT_TRUE(std::isnan(f)) << std::hex << b;
      ASSERT_TRUE(half_is_nan(back)) << std::hex << b;
      ASSERT_EQ(back & 0x8000u, h & 0x8000u) << "NaN sign lost for " << std::hex << b;
      continue;
    }
    ASSERT_EQ(static_cast<double>(f), expect) << std::hex << b;
    ASSERT_EQ(std::signbit(f), (h & 0x8000u) != 0) << std::hex << b;
    ASSERT_EQ(back, h) << "half -> float -> half changed " << std::hex << b;
    if (kHaveFloat16) {
      ASSERT_EQ(float_bits(f), float_bits(compiler_half_to_float(h))) << std::hex << b;
    }
  }
}

TEST_F(HalfTest, HandPickedHalfRoundings) {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const Case cases[] = {
      {0x3f800000u, 0x3c00u},  // 1
      {0x3f801000u, 0x3c00u},  // 1 + 2^-11: tie, even is 0x3c00
      {0x3f801001u, 0x3c01u},  // just above the tie
      {0x3f803000u, 0x3c02u},  // 1 + 3*2^-11: tie, even is 0x3c02
      {0x477fe000u, 0x7bffu},  // 65504, the largest half
      {0x477fefffu, 0x7bffu},  // just below 65520
      {0x477ff000u, 0x7c00u},  // 65520: tie between 65504 and 65536 (odd), rounds to infinity
      {0x47800000u, 0x7c00u},  // 65536
      {0x33000000u, 0x0000u},  // 2^-25: tie between 0 and the smallest subnormal, even is 0
      {0x33000001u, 0x0001u},  // just above
      {0x33c00000u, 0x0002u},  // 3 * 2^-25: tie between 1 and 2 subnormal ulps, even is 2
      {0x387fc000u, 0x03ffu},  // 1023 * 2^-24, the largest subnormal
      {0x387fe000u, 0x0400u},  // 1023.5 * 2^-24: tie between it and 2^-14, even is 0x0400
      {0x38800000u, 0x0400u},  // 2^-14, the smallest normal
      {0x00000001u, 0x0000u},  // fp32 subnormal
      {0x80000000u, 0x8000u},  // -0
      {0xc7800000u, 0xfc00u},  // -65536
      {0x7f800000u, 0x7c00u},  // inf
      {0xff800000u, 0xfc00u},  // -inf
  };
  for (const Case& c : cases) {
    EXPECT_EQ(float_to_half_bits(bits_float(c.in)), c.out) << std::hex << c.in;
    EXPECT_EQ(reference_float_to_half(bits_float(c.in)), c.out) << "reference disagrees on " << std::hex << c.in;
  }
  EXPECT_TRUE(half_is_nan(float_to_half_bits(bits_float(0x7f800001u))));  // signalling NaN stays NaN
  EXPECT_TRUE(half_is_nan(float_to_half_bits(bits_float(0xffc00000u))));
  EXPECT_EQ(kHalfMax, 65504.0f);
}

TEST_F(HalfTest, NearOverflowExhaustive) {
  // Every float in [65504, 65536] of both signs.
  for (uint32_t u = 0x477fe000u; u <= 0x47800000u; ++u) {
    for (uint32_t s : {0u, 0x80000000u}) {
      const float f = bits_float(u | s);
      ASSERT_EQ(float_to_half_bits(f), reference_float_to_half(f)) << std::hex << (u | s);
      if (kHaveFloat16) {
        ASSERT_EQ(float_to_half_bits(f), compiler_float_to_half(f)) << std::hex << (u | s);
      }
    }
  }
}

TEST_F(HalfTest, EveryHalfMidpointIsATieToEven) {
  // The exact midpoint between consecutive finite halves (representable in fp32) must round to
  // the one with an even fraction.
  for (uint32_t b = 0; b < 0x7bffu; ++b) {
    const double lo = reference_half_to_double(static_cast<uint16_t>(b));
    const double hi = reference_half_to_double(static_cast<uint16_t>(b + 1));
    const float mid = static_cast<float>((lo + hi) / 2);
    ASSERT_EQ(static_cast<double>(mid), (lo + hi) / 2);
    const uint16_t even = (b & 1u) ? static_cast<uint16_t>(b + 1) : static_cast<uint16_t>(b);
    ASSERT_EQ(float_to_half_bits(mid), even) << std::hex << b;
    ASSERT_EQ(float_to_half_bits(-mid), even | 0x8000u) << std::hex << b;
  }
}

TEST_F(HalfTest, RandomFloatsMatchReferences) {
  const std::vector<uint32_t> patterns = test_patterns(kNumRandom, 0x5eed1234u);
  size_t mismatches = 0;
  for (uint32_t u : patterns) {
    const float f = bits_float(u);
    const uint16_t got = float_to_half_bits(f);
    const uint16_t want = reference_float_to_half(f);
    if (std::isnan(f)) {
      if (!half_is_nan(got)) ++mismatches;
      if (kHaveFloat16 && !half_is_nan(compiler_float_to_half(f))) ++mismatches;
      continue;
    }
    if (got != want || (kHaveFloat16 && got != compiler_float_to_half(f))) {
      if (++mismatches <= 10) {
        ADD_FAILURE() << std::hex << "float " << u << ": got " << got << ", reference " << want
                      << (kHaveFloat16 ? ", _Float16 " : "") << (kHaveFloat16 ? compiler_float_to_half(f) : 0);
      }
    }
  }
  EXPECT_EQ(mismatches, 0u) << "out of " << patterns.size();
}

TEST_F(HalfTest, HandPickedBf16Ties) {
  struct Case {
    uint32_t in;
    uint16_t out;
  };
  const Case cases[] = {
      {0x3f808000u, 0x3f80u},                          // 1 + 2^-8: tie, 0x3f80 is even
      {0x3f818000u, 0x3f82u},                          // tie between 0x3f81 and 0x3f82: even is 0x3f82
      {0x3f808001u, 0x3f81u},                          // above the tie
      {0x3f807fffu, 0x3f80u},                          // below the tie
      {0xbf818000u, 0xbf82u},                          // negative tie
      {0x7f7f7fffu, 0x7f7fu},                          // just below the overflow tie: largest finite bf16
      {0x7f7f8000u, 0x7f80u},                          // tie between 0x7f7f and infinity: even is infinity
      {0x7f7fffffu, 0x7f80u},                          // FLT_MAX rounds to infinity
      {0xff7f8000u, 0xff80u}, {0x00008000u, 0x0000u},  // subnormal tie between 0 and 1: even is 0
      {0x00018000u, 0x0002u},                          // subnormal tie between 1 and 2: even is 2
      {0x007f8000u, 0x0080u},                          // largest subnormal tie: rounds up to the smallest normal
      {0x80000000u, 0x8000u},                          // -0
      {0x7f800000u, 0x7f80u},                          // inf
  };
  for (const Case& c : cases) {
    EXPECT_EQ(float_to_bf16_bits(bits_float(c.in)), c.out) << std::hex << c.in;
    EXPECT_EQ(reference_float_to_bf16(bits_float(c.in)), c.out) << "reference disagrees on " << std::hex << c.in;
  }
  // NaN must stay NaN; truncating 0x7f800001 would give infinity.
  EXPECT_TRUE(bf16_is_nan(float_to_bf16_bits(bits_float(0x7f800001u))));
  EXPECT_TRUE(bf16_is_nan(float_to_bf16_bits(bits_float(0xff800001u))));
  EXPECT_EQ(float_to_bf16_bits(bits_float(0xffc00000u)), 0xffc0u);
}

TEST_F(HalfTest, AllBf16PatternsRoundTrip) {
  for (uint32_t b = 0; b < 0x10000u; ++b) {
    const auto h = static_cast<uint16_t>(b);
    const float f = bf16_bits_to_float(h);
    ASSERT_EQ(float_bits(f), b << 16);
    if (bf16_is_nan(h)) {
      ASSERT_TRUE(bf16_is_nan(float_to_bf16_bits(f))) << std::hex << b;
    } else {
      ASSERT_EQ(float_to_bf16_bits(f), h) << std::hex << b;
    }
  }
}

TEST_F(HalfTest, RandomFloatsMatchBf16Reference) {
  const std::vector<uint32_t> patterns = test_patterns(kNumRandom, 0xbf16bf16u);
  size_t mismatches = 0;
  for (uint32_t u : patterns) {
    const float f = bits_float(u);
    const uint16_t got = float_to_bf16_bits(f);
    if (std::isnan(f)) {
      if (!bf16_is_nan(got)) ++mismatches;
      continue;
    }
    const uint16_t want = reference_float_to_bf16(f);
    if (got != want && ++mismatches <= 10) {
      ADD_FAILURE() << std::hex << "float " << u << ": got " << got << ", reference " << want;
    }
  }
  EXPECT_EQ(mismatches, 0u) << "out of " << patterns.size();
}

TEST_F(HalfTest, RoundHelpersAgreeWithBitConversions) {
  std::mt19937 rng(7);
  std::uniform_real_distribution<float> dist(-70000.0f, 70000.0f);
  for (int i = 0; i < 100000; ++i) {
    const float f = dist(rng);
    EXPECT_EQ(float_bits(round_to_bf16(f)), float_bits(bf16_bits_to_float(float_to_bf16_bits(f))));
    EXPECT_EQ(float_bits(round_to_half(f)), float_bits(half_bits_to_float(float_to_half_bits(f))));
  }
}

// ---- double -> bf16 / f16, rounded once ---------------------------------------------------------
// Reference independent of any float conversion: binary search over the format's non-negative bit
// patterns (ordered like their values) for the largest value <= |v|, then compare |v| with the
// exact midpoint to the next pattern (both have at most 12 significant bits: exact in double);
// a tie goes to the even pattern; past the midpoint above the largest finite value, infinity.
uint16_t reference_round_double(double v, float (*decode)(uint16_t), uint16_t max_finite, uint16_t inf,
                                double two_to_emax_plus_one) {
  const uint16_t sign = std::signbit(v) ? 0x8000u : 0u;
  const double a = std::fabs(v);
  if (std::isinf(a)) return sign | inf;
  uint16_t lo = 0, hi = max_finite;  // decode(lo) <= a is kept true
  if (static_cast<double>(decode(hi)) <= a) {
    lo = hi;
  } else {
    while (hi - lo > 1) {
      const auto mid = static_cast<uint16_t>((lo + hi) / 2);
      (static_cast<double>(decode(mid)) <= a ? lo : hi) = mid;
    }
  }
  const double below = decode(lo);
  const double above = lo == max_finite ? two_to_emax_plus_one : static_cast<double>(decode(lo + 1));
  const double midpoint = (below + above) / 2;
  uint16_t r = lo;
  if (a > midpoint || (a == midpoint && (lo & 1u))) r = static_cast<uint16_t>(lo + 1);
  return sign | (r > max_finite ? inf : r);
}

uint16_t reference_double_to_bf16(double v) {
  return reference_round_double(v, bf16_bits_to_float, 0x7f7f, 0x7f80, std::ldexp(1.0, 128));
}
uint16_t reference_double_to_half(double v) {
  return reference_round_double(v, half_bits_to_float, 0x7bff, 0x7c00, 65536.0);
}

// Doubles on every scale the formats cover (subnormal to overflow), and the hard cases: every
// midpoint of adjacent patterns, exactly and one double ulp either side (where double -> float ->
// bf16 rounds twice and goes the wrong way).
std::vector<double> double_cases(float (*decode)(uint16_t), uint16_t max_finite, uint64_t seed) {
  std::vector<double> cases = {0.0, -0.0, 1.0, -1.0, 1e-300, -1e300, 3.5e38, 3.4e38, 65519.999, 65520.0, 70000.0};
  for (uint32_t b = 0; b < max_finite; ++b) {
    const double mid =
        (static_cast<double>(decode(static_cast<uint16_t>(b))) + decode(static_cast<uint16_t>(b + 1))) / 2;
    for (double m : {mid, std::nextafter(mid, 0.0), std::nextafter(mid, 1e300)}) {
      cases.push_back(m);
      cases.push_back(-m);
    }
  }
  std::mt19937_64 rng(seed);
  std::uniform_real_distribution<double> mantissa(1.0, 2.0);
  std::uniform_int_distribution<int> exponent(-160, 130);
  for (int i = 0; i < 2'000'000; ++i) cases.push_back((rng() & 1 ? -1 : 1) * std::ldexp(mantissa(rng), exponent(rng)));
  return cases;
}

// One format's double conversion against the reference: no mismatch, and the cases must hold
// values where rounding twice (double -> float -> format) goes wrong, or they test nothing.
void check_rounds_once(uint16_t (*convert)(double), uint16_t (*reference)(double), uint16_t (*via_float)(float),
                       bool (*is_nan)(uint16_t), float (*decode)(uint16_t), uint16_t max_finite, uint64_t seed) {
  size_t mismatches = 0, twice_differs = 0;
  for (double v : double_cases(decode, max_finite, seed)) {
    const uint16_t got = convert(v), want = reference(v);
    twice_differs += via_float(static_cast<float>(v)) != want;
    if (got != want && ++mismatches <= 10)
      ADD_FAILURE() << std::hexfloat << v << std::hex << ": got " << got << ", reference " << want;
  }
  EXPECT_EQ(mismatches, 0u);
  EXPECT_GT(twice_differs, 1000u) << "the cases should include values where rounding twice goes wrong";
  EXPECT_TRUE(is_nan(convert(std::nan(""))));
}

TEST_F(HalfTest, DoubleToBf16RoundsOnce) {
  check_rounds_once(double_to_bf16_bits, reference_double_to_bf16, float_to_bf16_bits, bf16_is_nan, bf16_bits_to_float,
                    0x7f7f, 0xd0b1e);
}

TEST_F(HalfTest, DoubleToHalfRoundsOnce) {
  check_rounds_once(double_to_half_bits, reference_double_to_half, float_to_half_bits, half_is_nan, half_bits_to_float,
                    0x7bff, 0xd0b1f);
}

}  // namespace
}  // namespace echo
