// Backward power-of-two rescaling (Echo paper Sec. 5.4, Appendix C): gradients are multiplied
// by 2^e, with e chosen from the group-wide max so that gmax·2^e lies in [2^10, 2^11), before
// the quantized all-reduce, and divided by it after. Exact, because the factor is a power of
// two; it keeps small gradients from underflowing the fp16 group scale.
#pragma once

#include <cmath>

#include "core/hd.h"

namespace echo::comm {

// e such that gmax·2^e ∈ [2^10, 2^11); 0 when gmax is 0 (or not a positive finite number).
// e lies in [-117, 159]: beyond 127 (gmax < 2^-117, denormals included) 2^e itself is not a
// float, so scale with scale_pow2, never with a precomputed factor.
ECHO_HD int rescale_exponent(float gmax) {
  if (!(gmax > 0.0f) || !(gmax <= 3.402823466e38f)) return 0;
  int ex = 0;
  frexpf(gmax, &ex);  // gmax = m·2^ex, m ∈ [0.5, 1)  ->  floor(log2 gmax) = ex - 1
  return 11 - ex;
}

// The bits of |v| with a non-finite v as +inf, never NaN, so the group max (MPI_MAX, the shm max
// or a kernel's atomicMax on these bits, which order like the values) carries it and the caller
// reports it.
ECHO_HD uint32_t absmax_bits(float v) {
  const uint32_t magnitude = float_bits(v) & 0x7fffffffu;
  return magnitude >= 0x7f800000u ? 0x7f800000u : magnitude;
}

// The running max of |v| that picks e (absmax_bits' value).
ECHO_HD float absmax_step(float acc, float v) {
  const float a = bits_float(absmax_bits(v));
  return a > acc ? a : acc;
}

// x·2^e rounded once, exactly ldexpf(x, e), for any e. Where 2^e is a normal float this is one
// multiply by it (exact unless the result is denormal, then rounded once like ldexpf); else
// ldexpf, which does not overflow on the way for x·2^159 of a denormal x.
ECHO_HD float scale_pow2(float x, int e) {
  if (e >= -126 && e <= 127) return mul_rn(x, bits_float(static_cast<uint32_t>(e + 127) << 23));
  return ldexpf(x, e);
}

}  // namespace echo::comm
