// The group quantizer on the CPU (docs/design.md §6): hand-worked codes per policy, the error
// bound on random data, the special groups (zero, constant, poisoned), packing and the wire size.
// The CPU functions run the same ECHO_HD arithmetic as the CUDA kernels.
#include "comm/echo/quantizer.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "comm/echo/quantize.h"
#include "core/error.h"
#include "core/half.h"

namespace echo::comm {
namespace {

constexpr QuantPolicy kSym = QuantPolicy::symmetric;
constexpr QuantPolicy kNaive = QuantPolicy::asym_naive;
constexpr QuantPolicy kZeroAware = QuantPolicy::asym_zero_aware;

QuantSpec spec_of(QuantPolicy policy, int bits, int group_size) { return QuantSpec{policy, bits, group_size}; }

struct Quantized {
  std::vector<uint8_t> wire;
  QuantReport report;
};

Quantized run_quantize(const std::vector<float>& x, const QuantSpec& spec) {
  Quantized q;
  q.wire.assign(wire_bytes(x.size(), spec), 0xa5);  // garbage fill: every byte must be written
  q.report = quantize(x.data(), x.size(), spec, q.wire.data());
  return q;
}

std::vector<float> run_dequantize(const std::vector<uint8_t>& wire, size_t n, const QuantSpec& spec,
                                  QuantReport* report = nullptr) {
  std::vector<float> out(n, -12345.0f);
  const QuantReport r = dequantize(wire.data(), n, spec, out.data());
  if (report) *report = r;
  return out;
}

WireParams params_of(const std::vector<uint8_t>& wire, size_t n, const QuantSpec& spec, size_t group_idx) {
  return load_params(wire.data() + code_bytes(n, spec) + group_idx * group_param_bytes(spec.policy), spec.policy);
}

uint32_t code_of(const std::vector<uint8_t>& wire, const QuantSpec& spec, size_t i) {
  const size_t g = static_cast<size_t>(spec.group_size);
  const size_t group_idx = i / g, j = i % g;
  const uint8_t* codes = wire.data() + group_idx * group_code_bytes(g, spec.bits);
  return spec.bits == 8 ? codes[j] : unpack_nibble(codes[j / 2], j);
}

std::vector<uint32_t> codes_of(const std::vector<uint8_t>& wire, size_t n, const QuantSpec& spec) {
  std::vector<uint32_t> c(n);
  for (size_t i = 0; i < n; ++i) c[i] = code_of(wire, spec, i);
  return c;
}

bool is_integer(float v) { return std::nearbyint(v) == v; }

// ---- hand-worked examples, b = 4, one group of 8 ------------------------------------------------

// Symmetric. max|x| = 1.75, s = 1.75 / 7 = 0.25 (exact in fp16, bits 0x3400). x/s =
// [0.5, -2.5, 1.5, 7, -5.2, 2.4, -0.2, 4]; round half to even gives q = [0, -2, 2, 7, -5, 2, 0, 4]
// (0.5 -> 0, -2.5 -> -2, 1.5 -> 2: ties go to even); stored code q + 8 = [8, 6, 10, 15, 3, 10, 8, 12];
// x̂ = 0.25 q.
TEST(QuantizerHandWorked, Symmetric4) {
  const std::vector<float> x = {0.125f, -0.625f, 0.375f, 1.75f, -1.3f, 0.6f, -0.05f, 1.0f};
  const QuantSpec spec = spec_of(kSym, 4, 8);
  const Quantized q = run_quantize(x, spec);
  ASSERT_TRUE(q.report.ok());
  ASSERT_EQ(q.wire.size(), 4u + 2u);
  EXPECT_EQ(codes_of(q.wire, 8, spec), (std::vector<uint32_t>{8, 6, 10, 15, 3, 10, 8, 12}));
  // Packed: even element low nibble. (8, 6) -> 0x68, (10, 15) -> 0xfa, (3, 10) -> 0xa3, (8, 12) -> 0xc8.
  EXPECT_EQ(q.wire[0], 0x68);
  EXPECT_EQ(q.wire[1], 0xfa);
  EXPECT_EQ(q.wire[2], 0xa3);
  EXPECT_EQ(q.wire[3], 0xc8);
  EXPECT_EQ(q.wire[4], 0x00);  // scale 0x3400, little-endian
  EXPECT_EQ(q.wire[5], 0x34);
  EXPECT_EQ(run_dequantize(q.wire, 8, spec), (std::vector<float>{0.0f, -0.5f, 0.5f, 1.75f, -1.25f, 0.5f, 0.0f, 1.0f}));
}

// asym_naive. min = -0.25, max = 1.25: s = 1.5 / 15 = 0.1 -> fp16 0.0999755859375 (0x2e66);
// z = 0.25 / 0.1 = 2.5 (fp16 0x4100). v = x / s16 + 2.5 =
// [-0.0006, 2.5, 15.0031, 7.5012, 1.49976, 10.502, 5.8008, 12.5024] -> codes [0, 2, 15, 8, 1, 11, 6, 13].
// NOTE: x = -0.1 gives 1.49976 with the fp16 scale (code 1) but exactly 1.5 with the fp32 one (code 2):
// the codes are those of the map the receiver reads. Zero falls on 2.5 and comes back as
// s16 · (2 - 2.5) = -0.04998779296875: the naive map does not represent zero.
TEST(QuantizerHandWorked, AsymNaive4) {
  const std::vector<float> x = {-0.25f, 0.0f, 1.25f, 0.5f, -0.1f, 0.8f, 0.33f, 1.0f};
  const QuantSpec spec = spec_of(kNaive, 4, 8);
  const Quantized q = run_quantize(x, spec);
  ASSERT_TRUE(q.report.ok());
  ASSERT_EQ(q.wire.size(), 4u + 4u);
  EXPECT_EQ(codes_of(q.wire, 8, spec), (std::vector<uint32_t>{0, 2, 15, 8, 1, 11, 6, 13}));
  const WireParams p = params_of(q.wire, 8, spec, 0);
  EXPECT_EQ(p.scale_bits, 0x2e66);
  EXPECT_EQ(p.zero_bits, 0x4100);
  EXPECT_EQ(run_dequantize(q.wire, 8, spec),
            (std::vector<float>{-0.24993896484375f, -0.04998779296875f, 1.24969482421875f, 0.54986572265625f,
                                -0.14996337890625f, 0.84979248046875f, 0.34991455078125f, 1.04974365234375f}));
}

// asym_zero_aware, same data. s_0 = 0.1, z_f = 2.5, λ = min(1.25, 0.25) / 0.1 = 2.5 -> 1;
// z* = rne(2.5) = 2 (half to even); z = 2; s = max(1.25 / (15 - 2), 0.25 / 2) = max(0.0962, 0.125) = 0.125
// (fp16 0x3000, z 0x4000). v = x / 0.125 + 2 = [0, 2, 12, 6, 1.2, 8.4, 4.64, 10]
// -> codes [0, 2, 12, 6, 1, 8, 5, 10]; x̂ = 0.125 (code - 2), zero exact.
TEST(QuantizerHandWorked, ZeroAware4) {
  const std::vector<float> x = {-0.25f, 0.0f, 1.25f, 0.5f, -0.1f, 0.8f, 0.33f, 1.0f};
  const QuantSpec spec = spec_of(kZeroAware, 4, 8);
  const Quantized q = run_quantize(x, spec);
  ASSERT_TRUE(q.report.ok());
  EXPECT_EQ(codes_of(q.wire, 8, spec), (std::vector<uint32_t>{0, 2, 12, 6, 1, 8, 5, 10}));
  const WireParams p = params_of(q.wire, 8, spec, 0);
  EXPECT_EQ(p.scale_bits, 0x3000);
  EXPECT_EQ(p.zero_bits, 0x4000);
  EXPECT_EQ(run_dequantize(q.wire, 8, spec),
            (std::vector<float>{-0.25f, 0.0f, 1.25f, 0.5f, -0.125f, 0.75f, 0.375f, 1.0f}));
}

// asym_zero_aware inside the blend (0 < λ < 1). min = -0.05, max = 1.5: s_0 = 1.55 / 15 = 0.103333,
// z_f = 0.05 / s_0 = 0.483871, λ = 0.05 / s_0 = 0.483871, z* = clamp(rne(0.48), 1, 14) = 1,
// z = (1 - λ) z_f + λ = 0.733611, s = max(1.5 / (15 - z), 0.05 / z) = max(0.105142, 0.068157) = 0.105142.
// fp16: s16 = 0.10516357421875 (0x2ebb), z16 = 0.7333984375 (0x39de). v = x / s16 + z16 =
// [0.258, 0.733, 14.997, 7.390, 2.635, 11.193, 0.543, 5.012] -> codes [0, 1, 15, 7, 3, 11, 1, 5].
TEST(QuantizerHandWorked, ZeroAwareBlend4) {
  const std::vector<float> x = {-0.05f, 0.0f, 1.5f, 0.7f, 0.2f, 1.1f, -0.02f, 0.45f};
  const QuantSpec spec = spec_of(kZeroAware, 4, 8);
  const Quantized q = run_quantize(x, spec);
  ASSERT_TRUE(q.report.ok());
  EXPECT_EQ(codes_of(q.wire, 8, spec), (std::vector<uint32_t>{0, 1, 15, 7, 3, 11, 1, 5}));
  const WireParams p = params_of(q.wire, 8, spec, 0);
  EXPECT_EQ(p.scale_bits, 0x2ebb);
  EXPECT_EQ(p.zero_bits, 0x39de);
  const RawParams raw = zero_aware_params(-0.05f, 1.5f, 4);
  EXPECT_NEAR(raw.zero, 0.733611f, 1e-6f);
  EXPECT_NEAR(raw.scale, 0.105142f, 1e-6f);
  EXPECT_EQ(
      run_dequantize(q.wire, 8, spec),
      (std::vector<float>{-0.07712680101394653f, 0.028036773204803467f, 1.5003268718719482f, 0.6590182185173035f,
                          0.23836392164230347f, 1.0796725749969482f, 0.028036773204803467f, 0.44869107007980347f}));
}

// ---- random data ---------------------------------------------------------------------------------

enum class Shape { centered, shifted, uniform, outliers };

std::vector<float> random_values(size_t n, Shape shape, float sigma, uint32_t seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, sigma);
  std::uniform_real_distribution<float> uniform(-sigma, 3.0f * sigma);
  std::vector<float> x(n);
  for (size_t i = 0; i < n; ++i) {
    switch (shape) {
      case Shape::centered:
        x[i] = normal(rng);
        break;
      case Shape::shifted:
        x[i] = 6.0f * sigma + normal(rng);  // groups mostly on one side of zero: the naive branch
        break;
      case Shape::uniform:
        x[i] = uniform(rng);
        break;
      case Shape::outliers:
        x[i] = normal(rng) * (i % 37 == 5 ? 40.0f : 1.0f);
        break;
    }
    if (x[i] == 0.0f) x[i] = sigma;  // random inputs are never exactly zero
  }
  return x;
}

// Bound on |v - fp16(v)|: half an ulp, relative 2^-11 for normal values, 2^-25 for subnormal ones.
float half_rounding(float v) { return std::max(std::ldexp(std::fabs(v), -11), std::ldexp(1.0f, -25)) * 1.001f; }

// |x - x̂| <= s16 / 2 unless clipped, and the clip is off by what fp16 rounding moved the grid: the
// scale moves the code of x by |x| · |s - s16| / (s · s16) codes, the zero-point by |z - z16| codes. A
// zero-scale group holds only values below (2^b - 1) · 2^-25.
float error_bound(float x, const WireParams& p, const QuantSpec& spec) {
  const float s = half_bits_to_float(p.scale_bits);
  const float z = spec.policy == kSym ? 0.0f : half_bits_to_float(p.zero_bits);
  const float codes = spec.policy == kSym ? static_cast<float>((1 << (spec.bits - 1)) - 1) : code_max(spec.bits);
  if (s == 0.0f) return codes * std::ldexp(1.0f, -25);
  const float slack =
      std::fabs(x) * half_rounding(s) / (s - half_rounding(s)) + (spec.policy == kSym ? 0.0f : s * half_rounding(z));
  const float arith = std::ldexp(1.0f, -20) * (std::fabs(x) + s * (std::fabs(z) + codes));
  return 0.5f * s + slack + arith;
}

struct Case {
  size_t n;
  int group_size;
};

const Case kCases[] = {{1, 128},  {1, 8},     {7, 8},      {127, 128}, {129, 128}, {1000, 128}, {4099, 128},
                       {300, 32}, {513, 256}, {2048, 512}, {33, 1},    {65, 2},    {1001, 64}};

TEST(QuantizerRandom, ErrorBoundAllPolicies) {
  uint32_t seed = 1;
  size_t checked = 0;
  for (QuantPolicy policy : {kSym, kZeroAware, kNaive}) {
    for (int bits : {4, 8}) {
      for (const Case& c : kCases) {
        for (Shape shape : {Shape::centered, Shape::shifted, Shape::uniform, Shape::outliers}) {
          for (float sigma : {1e-3f, 1.0f, 300.0f}) {
            const QuantSpec spec = spec_of(policy, bits, c.group_size);
            const std::vector<float> x = random_values(c.n, shape, sigma, seed++);
            const Quantized q = run_quantize(x, spec);
            ASSERT_TRUE(q.report.ok());
            QuantReport dr;
            const std::vector<float> y = run_dequantize(q.wire, c.n, spec, &dr);
            ASSERT_TRUE(dr.ok());
            for (size_t i = 0; i < c.n; ++i) {
              const WireParams p = params_of(q.wire, c.n, spec, i / c.group_size);
              const float bound = error_bound(x[i], p, spec);
              ASSERT_LE(std::fabs(x[i] - y[i]), bound)
                  << "policy " << static_cast<int>(policy) << " bits " << bits << " n " << c.n << " g " << c.group_size
                  << " shape " << static_cast<int>(shape) << " sigma " << sigma << " i " << i << " x " << x[i] << " y "
                  << y[i] << " s " << half_bits_to_float(p.scale_bits);
              ++checked;
            }
          }
        }
      }
    }
  }
  EXPECT_GT(checked, 100000u);
}

// The bound is not vacuous: on centered data most of it is the s/2 term and the mean error is about s/4.
TEST(QuantizerRandom, ErrorIsAboutAQuarterStep) {
  const QuantSpec spec = spec_of(kZeroAware, 4, 128);
  const std::vector<float> x = random_values(128 * 64, Shape::centered, 1.0f, 77);
  const Quantized q = run_quantize(x, spec);
  const std::vector<float> y = run_dequantize(q.wire, x.size(), spec);
  double ratio = 0;
  for (size_t i = 0; i < x.size(); ++i) {
    ratio += std::fabs(x[i] - y[i]) / half_bits_to_float(params_of(q.wire, x.size(), spec, i / 128).scale_bits);
  }
  ratio /= static_cast<double>(x.size());
  EXPECT_GT(ratio, 0.2);
  EXPECT_LT(ratio, 0.3);
}

// Codes are computed from the fp16 parameters stored on the wire: recompute them independently,
// with std::nearbyint (the default round-half-to-even mode) instead of the quantizer's rounding.
TEST(QuantizerRandom, CodesUseTheStoredFp16Params) {
  uint32_t seed = 100;
  size_t differs_from_fp32_map = 0;
  for (QuantPolicy policy : {kSym, kNaive, kZeroAware}) {
    for (int bits : {4, 8}) {
      const QuantSpec spec = spec_of(policy, bits, 64);
      const std::vector<float> x = random_values(64 * 50 + 17, Shape::uniform, 2.0f, seed++);
      const Quantized q = run_quantize(x, spec);
      for (size_t i = 0; i < x.size(); ++i) {
        const WireParams p = params_of(q.wire, x.size(), spec, i / 64);
        const float s = half_bits_to_float(p.scale_bits);
        const float lo = policy == kSym ? -static_cast<float>((1 << (bits - 1)) - 1) : 0.0f;
        const float hi = policy == kSym ? static_cast<float>((1 << (bits - 1)) - 1) : code_max(bits);
        const float z = policy == kSym ? 0.0f : half_bits_to_float(p.zero_bits);
        const float offset = policy == kSym ? static_cast<float>(1 << (bits - 1)) : 0.0f;
        const float v = std::nearbyint(std::min(std::max(x[i] / s + z, lo), hi)) + offset;
        ASSERT_EQ(static_cast<float>(code_of(q.wire, spec, i)), v) << "i " << i;
        // The fp32 parameters would have given another code somewhere.
        const size_t begin = (i / 64) * 64, len = std::min<size_t>(64, x.size() - begin);
        GroupStats st = stats_empty();
        for (size_t j = begin; j < begin + len; ++j) stats_add(st, x[j]);
        const RawParams raw = raw_params(st.min, st.max, policy, bits);
        const float v32 = std::nearbyint(std::min(std::max(x[i] / raw.scale + raw.zero, lo), hi)) + offset;
        differs_from_fp32_map += v32 != v;
      }
    }
  }
  EXPECT_GT(differs_from_fp32_map, 0u);
}

// ---- special groups --------------------------------------------------------------------------------

TEST(QuantizerSpecial, ZeroIsExactWhenTheGroupStraddlesZeroByAStep) {
  uint32_t seed = 500;
  for (int bits : {4, 8}) {
    for (int trial = 0; trial < 200; ++trial) {
      const QuantSpec spec = spec_of(kZeroAware, bits, 32);
      std::vector<float> x = random_values(32, trial % 2 ? Shape::uniform : Shape::centered, 1.0f, seed++);
      x[static_cast<size_t>(trial) % 32] = 0.0f;  // the one zero whose round trip is checked
      GroupStats st = stats_empty();
      for (float v : x) stats_add(st, v);
      const float s0 = (st.max - st.min) / code_max(bits);
      if (!(st.min <= -s0 && st.max >= s0)) continue;  // λ < 1: not this test's case
      const Quantized q = run_quantize(x, spec);
      const WireParams p = params_of(q.wire, 32, spec, 0);
      const float z = half_bits_to_float(p.zero_bits);
      EXPECT_TRUE(is_integer(z)) << z;
      EXPECT_GE(z, 1.0f);
      EXPECT_LE(z, code_max(bits) - 1.0f);
      EXPECT_EQ(run_dequantize(q.wire, 32, spec)[static_cast<size_t>(trial) % 32], 0.0f);
    }
  }
}

TEST(QuantizerSpecial, AllZeroGroupIsExact) {
  for (QuantPolicy policy : {kSym, kNaive, kZeroAware}) {
    for (int bits : {4, 8}) {
      const QuantSpec spec = spec_of(policy, bits, 16);
      std::vector<float> x = random_values(16 * 3 + 5, Shape::centered, 1.0f, 9);
      std::fill(x.begin() + 16, x.begin() + 32, 0.0f);  // group 1
      x[20] = -0.0f;
      const Quantized q = run_quantize(x, spec);
      ASSERT_TRUE(q.report.ok());
      const std::vector<float> y = run_dequantize(q.wire, x.size(), spec);
      for (size_t i = 16; i < 32; ++i) EXPECT_EQ(y[i], 0.0f) << i;
      EXPECT_EQ(params_of(q.wire, x.size(), spec, 1).scale_bits, 0);
      // A group that is all zero except for the short tail of the tensor.
      std::vector<float> tail(3, 0.0f);
      const Quantized qt = run_quantize(tail, spec);
      EXPECT_EQ(run_dequantize(qt.wire, 3, spec), (std::vector<float>{0.0f, 0.0f, 0.0f}));
    }
  }
}

TEST(QuantizerSpecial, ConstantGroupWithinFp16Rounding) {
  for (QuantPolicy policy : {kSym, kNaive, kZeroAware}) {
    for (int bits : {4, 8}) {
      // Constants whose scale is a normal fp16 value (|c| / 255 >= 2^-14); below, the scale's own
      // subnormal rounding dominates (the backward rescaling, docs/design.md §9, keeps gradients out of that range).
      for (float c : {3.7f, -3.7f, 1234.5f, -1234.5f, 0.0234f, -0.0234f, 1.0f, -1.0f, 7e3f, -7e3f}) {
        for (size_t n : {size_t{1}, size_t{5}, size_t{32}}) {
          const QuantSpec spec = spec_of(policy, bits, 32);
          const std::vector<float> x(n, c);
          const Quantized q = run_quantize(x, spec);
          ASSERT_TRUE(q.report.ok()) << c;
          const std::vector<float> y = run_dequantize(q.wire, n, spec);
          const float tol = std::fabs(c) * (std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20));
          for (size_t i = 0; i < n; ++i) {
            EXPECT_LE(std::fabs(y[i] - c), tol)
                << "policy " << static_cast<int>(policy) << " bits " << bits << " c " << c << " got " << y[i];
            EXPECT_EQ(std::signbit(y[i]), std::signbit(c));
          }
          // The zero-point is an exact end of the grid (0 or 2^b - 1), never a division by zero.
          if (policy != kSym) {
            const float z = half_bits_to_float(params_of(q.wire, n, spec, 0).zero_bits);
            EXPECT_EQ(z, c > 0 ? 0.0f : code_max(bits));
          }
        }
      }
    }
  }
}

// A group so narrow for its offset that the naive z would overflow fp16 takes the same fallback.
// So does one whose naive scale rounds to fp16 zero while its values do not (s ~ 2e-8, values ~ 1e-3).
TEST(QuantizerSpecial, NarrowOffsetGroupKeepsItsValue) {
  const std::vector<std::vector<float>> groups = {{1000.0f, 1000.0001f, 1000.00006f, 1000.0f},
                                                  {-1000.0f, -1000.0001f, -1000.00006f, -1000.0f},
                                                  {1e-3f, 1.0003e-3f, 1.0001e-3f, 1.0002e-3f}};
  for (const std::vector<float>& x : groups) {
    for (QuantPolicy policy : {kNaive, kZeroAware}) {
      for (int bits : {4, 8}) {
        const QuantSpec spec = spec_of(policy, bits, 4);
        const Quantized q = run_quantize(x, spec);
        ASSERT_TRUE(q.report.ok());
        const std::vector<float> y = run_dequantize(q.wire, 4, spec);
        // fp16 rounding of the scale, relative or (subnormal scale, 8 bits) absolute.
        const float tol = std::fabs(x[0]) * std::ldexp(1.0f, -10) + code_max(bits) * std::ldexp(1.0f, -25);
        for (size_t i = 0; i < 4; ++i) EXPECT_NEAR(y[i], x[i], tol) << x[i];
      }
    }
  }
}

TEST(QuantizerSpecial, ScaleUnderflowDecodesToZeroNotPoison) {
  const std::vector<float> x = {1e-9f, -2e-9f, 3e-9f, 5e-10f};
  for (QuantPolicy policy : {kSym, kNaive, kZeroAware}) {
    const QuantSpec spec = spec_of(policy, 4, 4);
    const Quantized q = run_quantize(x, spec);
    ASSERT_TRUE(q.report.ok());
    EXPECT_EQ(run_dequantize(q.wire, 4, spec), (std::vector<float>{0.0f, 0.0f, 0.0f, 0.0f}));
  }
}

struct Poison {
  size_t index;
  float value;
};

// Poisoned groups: quantize reports them, writes NaN scale bits and zero codes; every other group's
// bytes are exactly those of the same data without the poison; decoding yields NaN there only.
TEST(QuantizerSpecial, PoisonedGroupsAreReportedAndDecodeToNaN) {
  const float inf = std::numeric_limits<float>::infinity();
  const float nan = std::numeric_limits<float>::quiet_NaN();
  for (QuantPolicy policy : {kSym, kNaive, kZeroAware}) {
    for (int bits : {4, 8}) {
      const int g = 16;
      const QuantSpec spec = spec_of(policy, bits, g);
      const size_t n = 16 * 6 + 3;
      const std::vector<float> clean = random_values(n, Shape::centered, 1.0f, 31);
      std::vector<float> x = clean;
      // group 1: NaN; group 3: +Inf; group 4: -Inf; group 6 (short): a value whose scale overflows fp16.
      const Poison poison[] = {{17, nan}, {50, inf}, {64, -inf}, {97, 3e7f}};
      for (const Poison& p : poison) x[p.index] = p.value;
      const Quantized q = run_quantize(x, spec);
      EXPECT_EQ(q.report.bad_groups, 4u);
      EXPECT_EQ(q.report.first_bad_element, 16u);
      EXPECT_FALSE(q.report.ok());
      const Quantized qc = run_quantize(clean, spec);
      const std::vector<size_t> bad_groups = {1, 3, 4, 6};
      for (size_t group_idx = 0; group_idx < 7; ++group_idx) {
        const bool bad = std::count(bad_groups.begin(), bad_groups.end(), group_idx) > 0;
        const WireParams p = params_of(q.wire, n, spec, group_idx);
        if (bad) {
          EXPECT_EQ(p.scale_bits, kPoisonScaleBits);
          EXPECT_EQ(p.zero_bits, 0);
        } else {
          const WireParams pc = params_of(qc.wire, n, spec, group_idx);
          EXPECT_EQ(p.scale_bits, pc.scale_bits);
          EXPECT_EQ(p.zero_bits, pc.zero_bits);
        }
        const size_t begin = group_idx * g, len = std::min<size_t>(g, n - begin);
        for (size_t i = begin; i < begin + len; ++i) {
          EXPECT_EQ(code_of(q.wire, spec, i), bad ? 0u : code_of(qc.wire, spec, i)) << i;
        }
      }
      QuantReport dr;
      const std::vector<float> y = run_dequantize(q.wire, n, spec, &dr);
      const std::vector<float> yc = run_dequantize(qc.wire, n, spec);
      EXPECT_EQ(dr.bad_groups, 4u);
      EXPECT_EQ(dr.first_bad_element, 16u);
      for (size_t i = 0; i < n; ++i) {
        const bool bad = std::count(bad_groups.begin(), bad_groups.end(), i / g) > 0;
        if (bad) {
          EXPECT_TRUE(std::isnan(y[i])) << i;
        } else {
          EXPECT_EQ(y[i], yc[i]) << i;
        }
      }
      std::vector<float> acc(n, 1.0f);
      const QuantReport ar = dequantize_add(q.wire.data(), n, spec, acc.data());
      EXPECT_EQ(ar.bad_groups, 4u);
      for (size_t i = 0; i < n; ++i) {
        const bool bad = std::count(bad_groups.begin(), bad_groups.end(), i / g) > 0;
        EXPECT_EQ(std::isnan(acc[i]), bad) << i;
      }
    }
  }
}

// The scale overflow threshold: a scale whose fp16 rounding is finite is kept, one that rounds to
// infinity (>= 65520) poisons the group.
TEST(QuantizerSpecial, ScaleOverflowThreshold) {
  const QuantSpec spec = spec_of(kSym, 4, 2);
  const std::vector<float> ok = {7.0f * 65504.0f, 1.0f};
  const Quantized qo = run_quantize(ok, spec);
  EXPECT_TRUE(qo.report.ok());
  EXPECT_EQ(params_of(qo.wire, 2, spec, 0).scale_bits, 0x7bff);
  EXPECT_EQ(run_dequantize(qo.wire, 2, spec)[0], 7.0f * 65504.0f);
  const std::vector<float> bad = {-7.0f * 65600.0f, 1.0f};
  const Quantized qb = run_quantize(bad, spec);
  EXPECT_EQ(qb.report.bad_groups, 1u);
  // A range that overflows fp32 itself poisons the asymmetric policies.
  const std::vector<float> huge = {-3e38f, 3e38f};
  for (QuantPolicy policy : {kNaive, kZeroAware}) {
    EXPECT_EQ(run_quantize(huge, spec_of(policy, 8, 2)).report.bad_groups, 1u);
  }
}

// ---- dequantize_add, packing, layout -----------------------------------------------------------------

TEST(QuantizerRandom, DequantizeAddAdds) {
  uint32_t seed = 900;
  for (QuantPolicy policy : {kSym, kNaive, kZeroAware}) {
    for (int bits : {4, 8}) {
      const QuantSpec spec = spec_of(policy, bits, 128);
      const size_t n = 128 * 7 + 45;
      const std::vector<float> x = random_values(n, Shape::outliers, 1.5f, seed++);
      const std::vector<float> acc0 = random_values(n, Shape::uniform, 10.0f, seed++);
      const Quantized q = run_quantize(x, spec);
      const std::vector<float> y = run_dequantize(q.wire, n, spec);
      std::vector<float> acc = acc0;
      ASSERT_TRUE(dequantize_add(q.wire.data(), n, spec, acc.data()).ok());
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(acc[i], acc0[i] + y[i]) << i;
    }
  }
}

TEST(QuantizerPacking, NibbleRoundTrip) {
  for (uint32_t even = 0; even < 16; ++even) {
    for (uint32_t odd = 0; odd < 16; ++odd) {
      const uint8_t b = pack_nibbles(even, odd);
      EXPECT_EQ(unpack_nibble(b, 0), even);
      EXPECT_EQ(unpack_nibble(b, 1), odd);
      EXPECT_EQ(unpack_nibble(b, 6), even);
      EXPECT_EQ(unpack_nibble(b, 7), odd);
    }
  }
}

// Codes survive the wire for every group length, including odd short last groups, whose last byte
// has a zero high nibble.
TEST(QuantizerPacking, QuantizedCodesRoundTripThroughTheWire) {
  for (int bits : {4, 8}) {
    for (size_t n : {size_t{1}, size_t{2}, size_t{3}, size_t{15}, size_t{16}, size_t{17}, size_t{31}}) {
      const QuantSpec spec = spec_of(kZeroAware, bits, 16);
      const std::vector<float> x = random_values(n, Shape::uniform, 1.0f, static_cast<uint32_t>(n));
      const Quantized q = run_quantize(x, spec);
      // Every code decodes to the value its own params give it.
      const std::vector<float> y = run_dequantize(q.wire, n, spec);
      for (size_t i = 0; i < n; ++i) {
        const WireParams p = params_of(q.wire, n, spec, i / 16);
        EXPECT_EQ(y[i], decode_code(code_of(q.wire, spec, i), decode_map(p, spec.policy, bits)));
      }
      if (bits == 4 && n % 2 == 1) {
        EXPECT_EQ(q.wire[code_bytes(n, spec) - 1] >> 4, 0);
      }
    }
  }
}

TEST(QuantizerLayout, WireBytes) {
  const QuantSpec asym4 = spec_of(kZeroAware, 4, 128);
  EXPECT_EQ(wire_bytes(128, asym4), 68u);
  EXPECT_EQ(wire_bytes(128 * 1000, asym4), 68u * 1000);
  EXPECT_LE(static_cast<double>(wire_bytes(128 * 1000, asym4)) / (128 * 1000), 0.27 * 2);
  EXPECT_EQ(wire_bytes(128, spec_of(kNaive, 4, 128)), 68u);
  EXPECT_EQ(wire_bytes(128, spec_of(kSym, 4, 128)), 66u);
  EXPECT_EQ(wire_bytes(128, spec_of(kZeroAware, 8, 128)), 132u);
  // n not a multiple of g: 3 groups, the last of 5 values -> 3 bytes of 4-bit codes.
  const size_t n = 2 * 128 + 5;
  EXPECT_EQ(num_groups(n, asym4), 3u);
  EXPECT_EQ(code_bytes(n, asym4), 64u + 64u + 3u);
  EXPECT_EQ(param_bytes(n, asym4), 12u);
  EXPECT_EQ(wire_bytes(n, asym4), 143u);
  EXPECT_EQ(wire_bytes(1, asym4), 1u + 4u);
  EXPECT_EQ(wire_bytes(0, asym4), 0u);
  EXPECT_EQ(num_groups(0, asym4), 0u);
  // g = 1 at 4 bits: one nibble per byte.
  EXPECT_EQ(code_bytes(5, spec_of(kSym, 4, 1)), 5u);
}

TEST(QuantizerLayout, RejectsUnsupportedSpecs) {
  EXPECT_THROW(validate(spec_of(kZeroAware, 3, 128)), echo::Error);
  EXPECT_THROW(validate(spec_of(kZeroAware, 16, 128)), echo::Error);
  EXPECT_THROW(validate(spec_of(kZeroAware, 4, 100)), echo::Error);
  EXPECT_THROW(validate(spec_of(kZeroAware, 4, 0)), echo::Error);
  EXPECT_THROW(validate(spec_of(kZeroAware, 4, -128)), echo::Error);
  EXPECT_THROW(validate(spec_of(static_cast<QuantPolicy>(7), 4, 128)), echo::Error);
  EXPECT_NO_THROW(validate(spec_of(kSym, 8, 1)));
  std::vector<float> x(4, 1.0f);
  std::vector<uint8_t> wire(16);
  EXPECT_THROW(quantize(x.data(), 4, spec_of(kSym, 5, 4), wire.data()), echo::Error);
  EXPECT_THROW(quantize(nullptr, 4, spec_of(kSym, 4, 4), wire.data()), echo::Error);
  EXPECT_NO_THROW(quantize(nullptr, 0, spec_of(kSym, 4, 4), nullptr));
}

// ---- the ECHO_HD pieces ----------------------------------------------------------------------------

TEST(QuantizerMath, GroupStats) {
  GroupStats s = stats_empty();
  for (float v : {0.5f, -2.0f, 1.5f, -0.0f}) stats_add(s, v);
  EXPECT_EQ(s.min, -2.0f);
  EXPECT_EQ(s.max, 1.5f);
  EXPECT_EQ(stats_absmax(s), 2.0f);
  EXPECT_TRUE(stats_finite(s));
  GroupStats t = stats_empty();
  stats_add(t, 3.0f);
  stats_add(t, std::numeric_limits<float>::quiet_NaN());
  EXPECT_EQ(t.max, 3.0f);  // NaN is skipped by min/max but marked
  EXPECT_FALSE(stats_finite(t));
  stats_merge(s, t);
  EXPECT_EQ(s.max, 3.0f);
  EXPECT_FALSE(stats_finite(s));
  GroupStats u = stats_empty();
  stats_add(u, std::numeric_limits<float>::max());  // the largest finite value is finite
  stats_add(u, -std::numeric_limits<float>::denorm_min());
  EXPECT_TRUE(stats_finite(u));
  stats_add(u, -std::numeric_limits<float>::infinity());
  EXPECT_FALSE(stats_finite(u));
}

TEST(QuantizerMath, RoundHalfToEven) {
  const float cases[][2] = {{0.5f, 0.0f},     {1.5f, 2.0f},     {2.5f, 2.0f},       {-0.5f, -0.0f},
                            {-1.5f, -2.0f},   {-2.5f, -2.0f},   {3.49f, 3.0f},      {3.51f, 4.0f},
                            {254.5f, 254.0f}, {255.5f, 256.0f}, {-127.5f, -128.0f}, {0.49999997f, 0.0f}};
  for (const auto& c : cases) {
    EXPECT_EQ(round_half_even(c[0]), c[1]) << c[0];
    EXPECT_EQ(round_half_even(c[0]), std::nearbyint(c[0])) << c[0];
  }
}

// Continuity of the zero-aware blend: as the group's minimum approaches zero from below (λ -> 0),
// the parameters approach the naive ones; at min = 0 they are the naive ones.
TEST(QuantizerMath, ZeroAwareBlendIsContinuousAtLambdaZero) {
  for (int bits : {4, 8}) {
    const float max = 1.3f;
    const float s0 = max / code_max(bits);
    for (float eps : {1e-1f, 1e-2f, 1e-3f, 1e-4f, 1e-6f}) {
      const float min = -eps * s0;  // z_f ≈ λ ≈ eps
      const RawParams naive = asym_naive_params(min, max, bits);
      const RawParams za = zero_aware_params(min, max, bits);
      EXPECT_LE(std::fabs(za.zero - naive.zero), 1.05f * eps + 1e-6f) << "bits " << bits << " eps " << eps;
      EXPECT_LE(std::fabs(za.scale / naive.scale - 1.0f), 0.1f * eps + 1e-6f) << "bits " << bits << " eps " << eps;
    }
    const RawParams at_zero = zero_aware_params(0.0f, max, bits);
    const RawParams naive_zero = asym_naive_params(0.0f, max, bits);
    EXPECT_EQ(at_zero.scale, naive_zero.scale);
    EXPECT_EQ(at_zero.zero, naive_zero.zero);
    // And at λ = 1 the zero-point is an integer.
    const RawParams full = zero_aware_params(-0.4f, max, bits);
    EXPECT_TRUE(is_integer(full.zero));
  }
}

}  // namespace
}  // namespace echo::comm
