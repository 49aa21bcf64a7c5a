// bf16 and fp16 <-> fp32 conversions with round-to-nearest-even, as ECHO_HD functions so the
// CPU reference and the CUDA kernels round identically. Values are carried as raw uint16_t
// bit patterns; NaN stays NaN (quiet), overflow rounds to infinity as IEEE 754 requires.
#pragma once

#include <math.h>  // nextafterf, for host and device alike

#include <cmath>

#include "core/hd.h"

namespace echo {

// ---- bfloat16: the upper 16 bits of an fp32 ---------------------------------------------

ECHO_HD uint16_t float_to_bf16_bits(float f) {
  uint32_t u = float_bits(f);
  if ((u & 0x7fffffffu) > 0x7f800000u) return static_cast<uint16_t>((u >> 16) | 0x0040u);  // quiet NaN
  u += 0x7fffu + ((u >> 16) & 1u);  // round half to even on the 16 dropped bits
  return static_cast<uint16_t>(u >> 16);
}

ECHO_HD float bf16_bits_to_float(uint16_t h) { return bits_float(static_cast<uint32_t>(h) << 16); }

ECHO_HD float round_to_bf16(float f) { return bf16_bits_to_float(float_to_bf16_bits(f)); }

// ---- IEEE binary16 ------------------------------------------------------------------------

ECHO_HD uint16_t float_to_half_bits(float f) {
  const uint32_t u = float_bits(f);
  const uint16_t sign = static_cast<uint16_t>((u >> 16) & 0x8000u);
  const uint32_t a = u & 0x7fffffffu;
  if (a >= 0x7f800000u) return sign | (a > 0x7f800000u ? 0x7e00u : 0x7c00u);  // NaN / Inf
  if (a >= 0x477ff000u) return sign | 0x7c00u;                                // >= 65520 rounds to infinity
  if (a < 0x38800000u) {
    // Below 2^-14 the result is subnormal (or zero): adding 0.5f aligns the value so that the
    // FPU's own round-to-nearest-even drops exactly the bits binary16 cannot hold.
    const float shifted = bits_float(a) + 0.5f;
    return sign | static_cast<uint16_t>(float_bits(shifted) - 0x3f000000u);
  }
  // Normal range: rebias the exponent (127 -> 15) and round the 13 dropped mantissa bits to even.
  const uint32_t odd = (a >> 13) & 1u;
  const uint32_t r = a + 0xc8000fffu + odd;  // 0xc8000000 = (15 - 127) << 23, 0xfff = half ulp - 1
  return sign | static_cast<uint16_t>(r >> 13);
}

ECHO_HD float half_bits_to_float(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000u) << 16;
  const uint32_t exp = (h >> 10) & 0x1fu;
  const uint32_t mant = h & 0x3ffu;
  if (exp == 0x1fu) return bits_float(sign | 0x7f800000u | (mant << 13));  // Inf / NaN
  if (exp == 0) {
    // Zero or subnormal: mant * 2^-24, exact in fp32.
    const float v = static_cast<float>(mant) * 5.9604644775390625e-08f;
    return sign ? -v : v;
  }
  return bits_float(sign | ((exp + 112u) << 23) | (mant << 13));  // 112 = 127 - 15
}

ECHO_HD float round_to_half(float f) { return half_bits_to_float(float_to_half_bits(f)); }

constexpr float kHalfMax = 65504.0f;

// ---- From double, rounded once ------------------------------------------------------------

// double -> float rounded to odd: truncate, then set the last bit when inexact. Rounding that to a
// format with at least two fewer significand bits (bf16, f16) is the correctly rounded (once)
// result, where double -> float -> bf16 could round twice (a value just above a bf16 midpoint
// that the float rounding lands on the midpoint, which then ties to even: the wrong way).
ECHO_HD float double_to_float_odd(double v) {
  float f = static_cast<float>(v);
  if (std::fabs(static_cast<double>(f)) > std::fabs(v)) f = nextafterf(f, 0.0f);  // toward zero
  if (static_cast<double>(f) != v) f = bits_float(float_bits(f) | 1u);            // sticky bit (NaN stays NaN)
  return f;
}

ECHO_HD uint16_t double_to_bf16_bits(double v) { return float_to_bf16_bits(double_to_float_odd(v)); }
ECHO_HD uint16_t double_to_half_bits(double v) { return float_to_half_bits(double_to_float_odd(v)); }

}  // namespace echo
