// Host-only (quantize.cpp) vector forms of two per-group steps of quantizer.h: group statistics
// over the lanes of one group, and wire_params over 16 groups at once, one group per lane.
// GCC/Clang vector extensions of W floats; quantize.cpp instantiates them with the width of each
// target it compiles for (16 for AVX-512, 8 for AVX2, 4 for baseline SSE2/NEON).
// NOTE: a vector wider than the target's registers is not split into registers but lowered lane
// by lane through the stack (GCC 12: 64-byte lanes on AVX2 ran the quantizer 8x slower), hence
// the width per target instead of one width for all.
//
// NOTE: every lane computes exactly what its ECHO_HD counterpart computes, op for op in the same
// order (each op rounds once, -ffp-contract=off), with the branches turned into selects; the
// rare cases whose scalar code has more branches than are worth writing twice (asym_naive's
// fallback map) are left to the scalar wire_params. tests/comm/quantizer_reference_test checks
// the result bit for bit against the scalar functions.
#pragma once

#include <cstring>

#include "comm/echo/quantizer.h"

namespace echo::comm::host_lanes {

// Groups per wire_params_lanes call.
inline constexpr size_t kParamLanes = 16;

#if defined(__GNUC__)
#define ECHO_LANES 1
#define ECHO_INLINE inline __attribute__((always_inline))  // compiled into each target that calls it

// NOTE: a vector returned by value has a different ABI per target, which GCC warns about
// (-Wpsabi) even for functions that are always inlined and so never called through an ABI. GCC
// reports it where templates are instantiated, at the end of the translation unit, so the
// warning is off for the rest of the file that includes this header (quantize.cpp, no other).
#pragma GCC diagnostic ignored "-Wpsabi"

template <int W>
struct Lanes {
  typedef float F __attribute__((vector_size(4 * W)));
  typedef uint32_t U __attribute__((vector_size(4 * W)));
  typedef int32_t I __attribute__((vector_size(4 * W)));  // comparison results: -1 or 0
};

// min_f and max_f (also stats_merge's selects), lane-wise.
template <typename V>
ECHO_INLINE V lane_min(const V& a, const V& b) {
  return b < a ? b : a;
}
template <typename V>
ECHO_INLINE V lane_max(const V& a, const V& b) {
  return b > a ? b : a;
}

// group_stats of x[0, len). NOTE: without fast-math GCC will not vectorize a float min/max
// reduction (x < m ? x : m is not MIN_EXPR under NaN and signed-zero rules), hence the explicit
// lanes, two sets for instruction-level parallelism. Each lane applies exactly stats_add's select
// (x86 minps/maxps compute that select), and the lanes never hold NaN, so any merge order gives
// the scalar loop's min and max up to the sign of a zero, which wire_params canonicalizes. The
// lanes merge as a tree (a scalar merge of 16 lanes costs as much as a 128-value group's loop).
template <int W>
struct LaneStats {
  using F = typename Lanes<W>::F;
  using U = typename Lanes<W>::U;
  F min, max;
  U bad;

  ECHO_INLINE static LaneStats empty() {
    const float inf = bits_float(0x7f800000u);
    return {F{} + inf, F{} - inf, U{}};
  }
  ECHO_INLINE void add(const float* x) {
    F v;
    std::memcpy(&v, x, sizeof v);
    min = lane_min(min, v);
    max = lane_max(max, v);
    bad |= ((U)v & 0x7f800000u) + 0x00800000u;  // nonfinite_mark; a vector cast keeps the bits
  }
  ECHO_INLINE void merge(const LaneStats& o) {
    min = lane_min(min, o.min);
    max = lane_max(max, o.max);
    bad |= o.bad;
  }
  // The lanes' stats, merged as a tree down to 4 lanes, those one by one.
  ECHO_INLINE GroupStats reduce() const {
    if constexpr (W == 4) {
      GroupStats s{min[0], max[0], bad[0]};
      for (int j = 1; j < 4; ++j) stats_merge(s, GroupStats{min[j], max[j], bad[j]});
      return s;
    } else {
      LaneStats<W / 2> lo, hi;
      std::memcpy(&lo.min, &min, sizeof lo.min);
      std::memcpy(&hi.min, reinterpret_cast<const char*>(&min) + sizeof hi.min, sizeof hi.min);
      std::memcpy(&lo.max, &max, sizeof lo.max);
      std::memcpy(&hi.max, reinterpret_cast<const char*>(&max) + sizeof hi.max, sizeof hi.max);
      std::memcpy(&lo.bad, &bad, sizeof lo.bad);
      std::memcpy(&hi.bad, reinterpret_cast<const char*>(&bad) + sizeof hi.bad, sizeof hi.bad);
      lo.merge(hi);
      return lo.reduce();
    }
  }
};

template <int W>
ECHO_INLINE GroupStats group_stats(const float* x, size_t len) {
  LaneStats<W> a = LaneStats<W>::empty(), b = a;
  size_t i = 0;
  for (; i + 2 * W <= len; i += 2 * W) {
    a.add(x + i);
    b.add(x + i + W);
  }
  for (; i + W <= len; i += W) a.add(x + i);
  a.merge(b);
  GroupStats s = a.reduce();
  for (; i < len; ++i) stats_add(s, x[i]);
  return s;
}

// float_to_half_bits (core/half.h), lane-wise; the fp16 bits in the low half of each lane.
template <typename F, typename U>
ECHO_INLINE U float_to_half_lanes(const F& f) {
  const U u = (U)f;
  const U sign = (u >> 16) & 0x8000u;
  const U a = u & 0x7fffffffu;
  const F shifted = (F)a + 0.5f;
  const U subnormal = ((U)shifted - 0x3f000000u) & 0xffffu;
  const U normal = ((a + 0xc8000fffu + ((a >> 13) & 1u)) >> 13) & 0xffffu;
  U h = a < 0x38800000u ? subnormal : normal;
  h = a >= 0x477ff000u ? U{} + 0x7c00u : h;  // >= 65520, and Inf
  h = a > 0x7f800000u ? U{} + 0x7e00u : h;   // NaN
  return sign | h;
}

// round_half_even (round_to_int's magic-number form), lane-wise.
template <typename F, typename U, typename I>
ECHO_INLINE F round_half_even_lanes(const F& v) {
  const F shifted = v + 12582912.0f;
  return __builtin_convertvector((I)((U)shifted - 0x4b400000u), F);
}

// wire_params of W groups from their statistics, as fp16 bits (scale, zero); `fallback` marks the
// lanes that need asym_naive_params' fallback map (left to the caller).
template <int W>
ECHO_INLINE void wire_params_vector(const float* mins, const float* maxs, const uint32_t* nonfinite, QuantPolicy policy,
                                    int bits, uint32_t* scale_out, uint32_t* zero_out, int32_t* fallback_out) {
  using F = typename Lanes<W>::F;
  using U = typename Lanes<W>::U;
  using I = typename Lanes<W>::I;
  F min, max;
  U bad;
  std::memcpy(&min, mins, sizeof min);
  std::memcpy(&max, maxs, sizeof max);
  std::memcpy(&bad, nonfinite, sizeof bad);
  const F zero = {}, one = zero + 1.0f;
  min = min == 0.0f ? zero : min;  // canonical +0, as wire_params
  max = max == 0.0f ? zero : max;
  const F neg_min = zero - min;

  F scale, z = zero;
  I fallback = {};
  if (policy == QuantPolicy::symmetric) {
    scale = lane_max(max, neg_min) / static_cast<float>((1 << (bits - 1)) - 1);  // symmetric_params
  } else {
    const float qmax = code_max(bits);
    // asym_naive_params' first map; the lanes where it has no fp16 form take the scalar path.
    const F s = (max - min) / qmax;
    const F zf = neg_min / s;
    const U s_half = float_to_half_lanes<F, U>(s);
    const I naive_ok = (s_half > 0u) & (s_half <= 0x7c00u) & (zf < 65520.0f) & (zf > -65520.0f);  // fp16(s) > 0
    if (policy == QuantPolicy::asym_naive) {
      scale = s;
      z = zf;
      fallback = ~naive_ok;
    } else {  // zero_aware_params
      const I straddles = (min < 0.0f) & (max > 0.0f);
      const F lambda = lane_min(lane_max(lane_min(max, neg_min) / s, zero), one);
      const F zstar = lane_min(lane_max(round_half_even_lanes<F, U, I>(zf), one), zero + (qmax - 1.0f));
      const F zb = (1.0f - lambda) * zf + lambda * zstar;  // two products, then the sum: no FMA
      const F room_hi = qmax - zb;
      const F s_hi = room_hi > 0.0f ? max / room_hi : zero;
      const F s_lo = zb > 0.0f ? neg_min / zb : zero;
      const I blend = lambda > 0.0f;
      const I zero_scale = ~(s > 0.0f);  // the range underflows fp32: (0, 0)
      const F sz = zero_scale ? zero : (blend ? lane_max(s_hi, s_lo) : s);  // !(lambda > 0): (s0, zf)
      const F zz = zero_scale ? zero : (blend ? zb : zf);
      scale = straddles ? sz : s;  // one-sided groups: asym_naive_params
      z = straddles ? zz : zf;
      fallback = ~straddles & ~naive_ok;
    }
  }

  // wire_params' tail, in its order: poison, zero scale (which returns before the zero point is
  // converted and checked), the fp16 zero point.
  const U scale_bits = float_to_half_lanes<F, U>(scale);
  const U zero_bits = policy == QuantPolicy::symmetric ? U{} : float_to_half_lanes<F, U>(z);
  const I nonfinite_input = (bad & 0x80000000u) != 0u;
  const I zero_scale = (scale_bits & 0x7fffu) == 0u;
  const I poisoned =
      nonfinite_input | ((scale_bits & 0x7c00u) == 0x7c00u) | (~zero_scale & ((zero_bits & 0x7c00u) == 0x7c00u));
  const U out_scale = poisoned ? U{} + kPoisonScaleBits : (zero_scale ? U{} : scale_bits);
  const U out_zero = (poisoned | zero_scale) ? U{} : zero_bits;
  const I out_fallback = fallback & ~nonfinite_input;  // a non-finite group is poisoned first
  std::memcpy(scale_out, &out_scale, sizeof out_scale);
  std::memcpy(zero_out, &out_zero, sizeof out_zero);
  std::memcpy(fallback_out, &out_fallback, sizeof out_fallback);
}

// wire_params for groups [0, count), count <= kParamLanes, from their statistics in three arrays
// of kParamLanes (entries past count hold anything).
template <int W>
ECHO_INLINE void wire_params_lanes(const float* mins, const float* maxs, const uint32_t* nonfinite, size_t count,
                                   QuantPolicy policy, int bits, WireParams* out) {
  static_assert(kParamLanes % W == 0);
  alignas(64) uint32_t scale[kParamLanes], zero[kParamLanes];
  alignas(64) int32_t fallback[kParamLanes];
  for (size_t k = 0; k < kParamLanes; k += W)
    wire_params_vector<W>(mins + k, maxs + k, nonfinite + k, policy, bits, scale + k, zero + k, fallback + k);
  for (size_t k = 0; k < count; ++k) {
    out[k] = fallback[k] ? wire_params(GroupStats{mins[k], maxs[k], nonfinite[k]}, policy, bits)
                         : WireParams{static_cast<uint16_t>(scale[k]), static_cast<uint16_t>(zero[k])};
  }
}

#else  // no vector extensions: the scalar functions

#define ECHO_INLINE inline

template <int W>
GroupStats group_stats(const float* x, size_t len) {
  GroupStats s = stats_empty();
  for (size_t i = 0; i < len; ++i) stats_add(s, x[i]);
  return s;
}

template <int W>
void wire_params_lanes(const float* mins, const float* maxs, const uint32_t* nonfinite, size_t count,
                       QuantPolicy policy, int bits, WireParams* out) {
  for (size_t k = 0; k < count; ++k) out[k] = wire_params(GroupStats{mins[k], maxs[k], nonfinite[k]}, policy, bits);
}

#endif

}  // namespace echo::comm::host_lanes
