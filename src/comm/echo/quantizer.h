// The group quantizer's arithmetic (docs/design.md §6, Echo paper Sec. 4.3) as ECHO_HD functions.
// The CPU reference (quantize.cpp) and the CUDA kernels (kernels/quantize.cu) both call these, so
// the CPU tests check the kernels' own math and both sides write the same bytes.
//
// Design
//   A group of len <= g values is reduced to GroupStats (min, max, a non-finite mark); wire_params
//   turns the stats into the fp16 parameters the receiver reads, rounding s and z to fp16 BEFORE
//   any code is computed (code_map is built from the rounded values), so sender and receiver use
//   one map. Codes: code = rne(clip(x / s + z, lo, hi)) + offset; decode: x̂ = s · (code − center).
//     symmetric        z = 0, [lo, hi] = ±(2^(b−1) − 1), offset = center = 2^(b−1). The stored code is
//                      the unsigned q + 2^(b−1) ∈ [1, 2^b − 1] (code 0 is never written), so
//                      x̂ = s · (code − 2^(b−1)) = s · q exactly.
//     asym_*           [lo, hi] = [0, 2^b − 1], offset = 0, center = z (fp16, fractional for naive).
//   Clipping an integer range commutes with round-half-to-even, so clipping first keeps the rounded
//   value small enough for the host's magic-number rounding (|v| <= 2^22).
//   Special groups (all decided in wire_params, so the kernels inherit them):
//     poisoned   a NaN/Inf input, or a scale whose fp16 rounding is infinite (s >= 65520, i.e. above
//                the fp16 max 65504 after rounding), writes scale bits 0x7e00 (fp16 NaN), zero 0 and
//                all-zero codes; decoding yields NaN and the decoders count the group.
//     zero scale the fp16 scale is 0: an all-zero group, or one whose every |x| < 2^b · 2^-25, too
//                small for any fp16 scale (the asymmetric maps fall back before a group of larger
//                values could get here). Every code is the code of 0 (symmetric: 2^(b−1), asymmetric:
//                0 with z = 0) and decodes to exactly +0; encode_code never divides by a zero scale.
//     constant   max == min = c ≠ 0. Symmetric needs nothing special (s = |c| / (2^(b−1) − 1), code
//                ±(2^(b−1) − 1)). For the asymmetric maps s_0 = 0 and z = −min / s_0 is undefined,
//                so asym_naive_params maps the grid onto [min(c, 0), max(c, 0)]: c > 0 gives
//                s = c / (2^b − 1), z = 0, code 2^b − 1; c < 0 gives s = −c / (2^b − 1), z = 2^b − 1,
//                code 0. Either way x̂ = ±(2^b − 1) · fp16(s), within fp16 rounding of c. The same
//                fallback covers groups so narrow relative to their offset that the naive map has
//                no fp16 form (z overflows, |z| >= 65520, or s rounds to 0); those values land on
//                the top (bottom) code.
//   NOTE: the naive map's fractional z is stored in fp16, so for groups far from zero (|z| > 2048)
//   the stored z is off by up to ulp(z)/2 codes and the extreme values clip by that much. That is
//   inherent to "z fractional, stored fp16" (docs/design.md §6); groups that straddle zero keep z in (0, 2^b − 1).
//   NOTE: bit-identical CPU/GPU results rest on IEEE fp32 ops in a fixed order: under nvcc every
//   op goes through __f*_rn intrinsics, which are never contracted into FMAs nor relaxed by
//   fast-math flags; the host build passes -ffp-contract=off (GCC fuses by default even in ISO
//   mode once FMA is enabled, e.g. by -march=native) and no fast-math (tests/core/fp_contract_test).
#pragma once

#include <cstddef>
#include <cstdint>

#include "core/half.h"
#include "core/hd.h"
#include "core/quant_spec.h"

namespace echo::comm {

inline constexpr uint16_t kPoisonScaleBits = 0x7e00;    // fp16 quiet NaN: marks a poisoned group
inline constexpr uint32_t kQuantNanBits = 0x7fc00000u;  // the fp32 NaN a poisoned group decodes to

ECHO_HD float min_f(float a, float b) { return b < a ? b : a; }
ECHO_HD float max_f(float a, float b) { return b > a ? b : a; }
ECHO_HD float clamp_f(float v, float lo, float hi) { return min_f(max_f(v, lo), hi); }

ECHO_HD float round_half_even(float v) { return static_cast<float>(round_to_int(v)); }

// ---- wire layout ----------------------------------------------------------------------------------

ECHO_HD bool quant_spec_supported(const QuantSpec& spec) {
  const bool policy_ok = spec.policy == QuantPolicy::symmetric || spec.policy == QuantPolicy::asym_naive ||
                         spec.policy == QuantPolicy::asym_zero_aware;
  const bool bits_ok = spec.bits == 4 || spec.bits == 8;
  const bool group_ok = spec.group_size > 0 && (spec.group_size & (spec.group_size - 1)) == 0;
  return policy_ok && bits_ok && group_ok;
}

ECHO_HD size_t group_code_bytes(size_t len, int bits) { return (len * static_cast<size_t>(bits) + 7) / 8; }
ECHO_HD size_t group_param_bytes(QuantPolicy policy) { return policy == QuantPolicy::symmetric ? 2 : 4; }

// Byte counts of n values quantized with spec (the layout of quantize.h).
struct WireLayout {
  size_t num_groups = 0;
  size_t code_bytes = 0;         // all groups' codes; the parameters start here
  size_t param_bytes = 0;        // all groups' fp16 parameters
  size_t group_code_bytes = 0;   // stride of a full group's codes
  size_t group_param_bytes = 0;  // stride of a group's parameters
};

ECHO_HD WireLayout wire_layout(size_t n, const QuantSpec& spec) {
  WireLayout l;
  const size_t g = static_cast<size_t>(spec.group_size);
  l.num_groups = (n + g - 1) / g;
  l.group_code_bytes = group_code_bytes(g, spec.bits);
  l.group_param_bytes = group_param_bytes(spec.policy);
  if (l.num_groups > 0) {
    const size_t last_len = n - (l.num_groups - 1) * g;
    l.code_bytes = (l.num_groups - 1) * l.group_code_bytes + group_code_bytes(last_len, spec.bits);
  }
  l.param_bytes = l.num_groups * l.group_param_bytes;
  return l;
}

// ---- group statistics -------------------------------------------------------------------------------

// min and max skip NaN (x < NaN is false); `nonfinite` has bit 31 set once a NaN or Inf was seen:
// adding one exponent step to an all-ones exponent carries into bit 31, any finite exponent does not.
struct GroupStats {
  float min;
  float max;
  uint32_t nonfinite;
};

ECHO_HD GroupStats stats_empty() { return {bits_float(0x7f800000u), bits_float(0xff800000u), 0u}; }
ECHO_HD uint32_t nonfinite_mark(float x) { return (float_bits(x) & 0x7f800000u) + 0x00800000u; }

ECHO_HD void stats_add(GroupStats& s, float x) {
  s.min = x < s.min ? x : s.min;
  s.max = x > s.max ? x : s.max;
  s.nonfinite |= nonfinite_mark(x);
}

ECHO_HD void stats_merge(GroupStats& s, const GroupStats& o) {
  s.min = o.min < s.min ? o.min : s.min;
  s.max = o.max > s.max ? o.max : s.max;
  s.nonfinite |= o.nonfinite;
}

ECHO_HD bool stats_finite(const GroupStats& s) { return (s.nonfinite & 0x80000000u) == 0; }
ECHO_HD float stats_absmax(const GroupStats& s) { return max_f(s.max, sub_rn(0.0f, s.min)); }

// ---- parameters per policy (fp32, before the fp16 rounding) ----------------------------------------

struct RawParams {
  float scale;
  float zero;  // symmetric: 0
};

ECHO_HD float code_max(int bits) { return static_cast<float>((1 << bits) - 1); }  // 2^b − 1

// s = max|x| / (2^(b−1) − 1).
ECHO_HD RawParams symmetric_params(float min, float max, int bits) {
  const float absmax = max_f(max, sub_rn(0.0f, min));
  return {div_rn(absmax, static_cast<float>((1 << (bits - 1)) - 1)), 0.0f};
}

// s = (max − min) / (2^b − 1); z = −min / s, fractional. When that map has no fp16 form (a constant
// group: s = 0; a range so narrow that s rounds to fp16 zero or z overflows fp16) the group falls
// back to the grid over [min(min, 0), max(max, 0)] (see the design block).
// NOTE: testing the fp16 scale, not just s > 0, matters: a group like [1e-3, 1e-3 + 3e-7] has
// s < 2^-25 (fp16 zero) but a finite z, and would otherwise decode to zeros instead of ≈ 1e-3.
ECHO_HD RawParams asym_naive_params(float min, float max, int bits) {
  const float qmax = code_max(bits);
  const float s = div_rn(sub_rn(max, min), qmax);
  const float z = div_rn(sub_rn(0.0f, min), s);
  const bool fp16_ok = round_to_half(s) > 0.0f && z < 65520.0f && z > -65520.0f;
  if (fp16_ok) return {s, z};  // also passes s = Inf: poisoned by wire_params
  if (min >= 0.0f) return {div_rn(max, qmax), 0.0f};
  if (max <= 0.0f) return {div_rn(sub_rn(0.0f, min), qmax), qmax};
  return {s, 0.0f};  // straddles zero with |x| < 2^b · 2^-25: s rounds to 0, a zero-scale group
}

// The zero-aware blend (docs/design.md §6; the paper leaves it open, this is our definition, and
// this is its one place). Groups on one side of zero take the naive map. Otherwise, with
// s_0 = (max − min)/(2^b − 1) and z_f = −min/s_0:
//   λ  = clamp(min(max, −min) / s_0, 0, 1)     λ = 1 once zero lies a full step inside the range
//   z* = clamp(rne(z_f), 1, 2^b − 2)
//   z  = (1 − λ)·z_f + λ·z*
//   s  = max(max / (2^b − 1 − z), −min / z)    the grid still covers [min, max]
// λ = 0 returns (s_0, z_f) exactly, so the map is continuous with the naive one; λ = 1 gives an
// integer z and represents zero exactly. The guards on the two denominators only matter when z
// rounds onto 0 or 2^b − 1 in fp32, i.e. when the value on that side is negligible.
ECHO_HD RawParams zero_aware_params(float min, float max, int bits) {
  if (!(min < 0.0f && max > 0.0f)) return asym_naive_params(min, max, bits);
  const float qmax = code_max(bits);
  const float s0 = div_rn(sub_rn(max, min), qmax);
  if (!(s0 > 0.0f)) return {0.0f, 0.0f};  // range underflows fp32: a zero-scale group
  const float zf = div_rn(sub_rn(0.0f, min), s0);
  const float lambda = clamp_f(div_rn(min_f(max, sub_rn(0.0f, min)), s0), 0.0f, 1.0f);
  if (!(lambda > 0.0f)) return {s0, zf};  // also s0 = Inf (range overflow): poisoned later
  const float zstar = clamp_f(round_half_even(zf), 1.0f, sub_rn(qmax, 1.0f));
  const float z = add_rn(mul_rn(sub_rn(1.0f, lambda), zf), mul_rn(lambda, zstar));
  const float room_hi = sub_rn(qmax, z);
  const float s_hi = room_hi > 0.0f ? div_rn(max, room_hi) : 0.0f;
  const float s_lo = z > 0.0f ? div_rn(sub_rn(0.0f, min), z) : 0.0f;
  return {max_f(s_hi, s_lo), z};
}

ECHO_HD RawParams raw_params(float min, float max, QuantPolicy policy, int bits) {
  switch (policy) {
    case QuantPolicy::symmetric:
      return symmetric_params(min, max, bits);
    case QuantPolicy::asym_naive:
      return asym_naive_params(min, max, bits);
    default:
      return zero_aware_params(min, max, bits);
  }
}

// ---- what goes on the wire --------------------------------------------------------------------------

struct WireParams {
  uint16_t scale_bits;  // fp16
  uint16_t zero_bits;   // fp16; 0 for symmetric and for poisoned or zero-scale groups
};

ECHO_HD bool half_nonfinite(uint16_t h) { return (h & 0x7c00u) == 0x7c00u; }
ECHO_HD bool params_poisoned(const WireParams& p) { return half_nonfinite(p.scale_bits); }

// The stats -> fp16 parameters step, including the poison and zero-scale rules.
ECHO_HD WireParams wire_params(const GroupStats& stats, QuantPolicy policy, int bits) {
  const WireParams poisoned{kPoisonScaleBits, 0};
  if (!stats_finite(stats)) return poisoned;
  // NOTE: min/max keep whichever signed zero came first, which depends on the reduction order;
  // canonicalize to +0 so the host loop and the warp reduction produce the same bits.
  const float min = stats.min == 0.0f ? 0.0f : stats.min;
  const float max = stats.max == 0.0f ? 0.0f : stats.max;
  const RawParams raw = raw_params(min, max, policy, bits);
  const uint16_t scale_bits = float_to_half_bits(raw.scale);
  if (half_nonfinite(scale_bits)) return poisoned;  // fp16 overflow (raw.scale >= 65520)
  if ((scale_bits & 0x7fffu) == 0) return {0, 0};   // zero scale: every code decodes to +0
  if (policy == QuantPolicy::symmetric) return {scale_bits, 0};
  const uint16_t zero_bits = float_to_half_bits(raw.zero);
  if (half_nonfinite(zero_bits)) return poisoned;  // unreachable: asym_naive_params keeps |z| < 65520
  return {scale_bits, zero_bits};
}

// Little-endian fp16 words at any byte alignment (the parameter block follows the codes, whose
// length can be odd).
ECHO_HD void store_params(uint8_t* p, const WireParams& w, QuantPolicy policy) {
  p[0] = static_cast<uint8_t>(w.scale_bits & 0xffu);
  p[1] = static_cast<uint8_t>(w.scale_bits >> 8);
  if (policy != QuantPolicy::symmetric) {
    p[2] = static_cast<uint8_t>(w.zero_bits & 0xffu);
    p[3] = static_cast<uint8_t>(w.zero_bits >> 8);
  }
}

ECHO_HD WireParams load_params(const uint8_t* p, QuantPolicy policy) {
  WireParams w;
  w.scale_bits = static_cast<uint16_t>(p[0] | (p[1] << 8));
  w.zero_bits = policy == QuantPolicy::symmetric ? uint16_t{0} : static_cast<uint16_t>(p[2] | (p[3] << 8));
  return w;
}

// ---- codes --------------------------------------------------------------------------------------------

// code = rne(clip(x / scale + zero, lo, hi)) + offset, built from the fp16-rounded parameters.
struct CodeMap {
  float scale;
  float zero;
  float lo;
  float hi;
  int offset;
};

ECHO_HD CodeMap code_map(const WireParams& w, QuantPolicy policy, int bits) {
  CodeMap m;
  m.scale = half_bits_to_float(w.scale_bits);
  if (policy == QuantPolicy::symmetric) {
    const int half = 1 << (bits - 1);
    m.zero = 0.0f;
    m.lo = static_cast<float>(1 - half);
    m.hi = static_cast<float>(half - 1);
    m.offset = half;
  } else {
    m.zero = half_bits_to_float(w.zero_bits);
    m.lo = 0.0f;
    m.hi = code_max(bits);
    m.offset = 0;
  }
  return m;
}

// NOTE: not for poisoned groups (their codes are all zero, written by the caller).
ECHO_HD uint32_t encode_code(float x, const CodeMap& m) {
  const float q = m.scale > 0.0f ? div_rn(x, m.scale) : 0.0f;  // zero-scale group: the code of 0
  const float v = clamp_f(add_rn(q, m.zero), m.lo, m.hi);
  return static_cast<uint32_t>(round_to_int(v) + m.offset);
}

// x̂ = scale · (code − center). Poisoned groups have scale NaN; decoders write kQuantNanBits for them
// explicitly so host and device produce the same NaN.
struct DecodeMap {
  float scale;
  float center;
  bool poisoned;
};

ECHO_HD DecodeMap decode_map(const WireParams& w, QuantPolicy policy, int bits) {
  DecodeMap d;
  d.scale = half_bits_to_float(w.scale_bits);
  d.center = policy == QuantPolicy::symmetric ? static_cast<float>(1 << (bits - 1)) : half_bits_to_float(w.zero_bits);
  d.poisoned = params_poisoned(w);
  return d;
}

ECHO_HD float decode_code(uint32_t code, const DecodeMap& d) {
  return mul_rn(d.scale, sub_rn(static_cast<float>(code), d.center));
}

ECHO_HD float quant_nan() { return bits_float(kQuantNanBits); }

// 4-bit packing: element 2k in the low nibble of byte k, element 2k + 1 in the high nibble.
ECHO_HD uint8_t pack_nibbles(uint32_t even, uint32_t odd) { return static_cast<uint8_t>(even | (odd << 4)); }
ECHO_HD uint32_t unpack_nibble(uint8_t byte, size_t element_idx) {
  return (element_idx & 1) ? static_cast<uint32_t>(byte >> 4) : static_cast<uint32_t>(byte & 0x0fu);
}

}  // namespace echo::comm
