// INT8 / S3R arithmetic shared by the CPU reference and the CUDA kernels (docs/design.md §11,
// S3R paper §III): RTNE int8 quantization with a scale, the stochastic rounding rule
// q = floor(v + R), and where each 7-bit threshold R comes from in the Philox stream.
//
// Design (the contract both backends implement bit for bit):
//  * Grid: symmetric int8 [-127, 127]; -128 is never produced. A row's scale is s = amax / 127 and
//    its inverse 127 / amax; an all-zero row (amax below kMinAmax) gets s = 1, so the backward's
//    diag(s)^-1 stays finite (its codes are all 0, any scale reproduces it).
//  * RTNE: code = clamp(rtne(x * inv_scale)). The product is rounded once (no FMA on either side).
//    NOTE: GCC contracts a * b + c into an FMA whenever the target has FMA, also in ISO C++ mode;
//    the x86-64 baseline has none. A build with -march=native (or -mfma) must add
//    -ffp-contract=off for echo_quant, or the CPU codes stop matching the GPU's.
//  * Stochastic: code = clamp(floor(v + R)), v = g' * (1 / Δ), evaluated exactly as
//    floor(v) + [frac(v) >= 1 - R] (frac(v) and 1 - R are exact in fp32 for |v| < 2^22, so the
//    comparison is the exact one and host and device agree). R = (k + 0.5) / 128, k a 7-bit
//    Philox code: the half-step shift bounds the bias by Δ/256 (paper §III-B).
//  * Threshold stream: key = philox_key(run seed); counter c = {c0, c1, c2, c3} with
//      c0 = step, c1 = layer << 8 | site,
//      per_token    c2 = token / 16,           c3 = 0,           word (token / 4) % 4, code j = token % 4
//      per_example  c2 = global example index, c3 = 0xffffffff,  word 0,               code j = 0
//      independent  c2 = global token index,   c3 = 1 + ch / 16, word (ch / 4) % 4,    code j = ch % 4
//    (token = GLOBAL token index, ch = GLOBAL output channel). Code j of a 32-bit word is its byte j
//    masked to 7 bits: four thresholds per word, 16 per Philox call, as the S3R paper cuts them
//    (per_example keeps one call per example: a step has few examples). Indices are global
//    (token_offset, channel_offset added by the caller), so any TP/DP factorization draws the
//    same thresholds; the three kinds use disjoint counters. site < 256, layer < 2^24, tokens
//    and examples per step < 2^32, ch < 2^36.
#pragma once

#include "core/hd.h"
#include "core/philox.h"

namespace echo::quant {

constexpr int32_t kInt8Max = 127;
// Below this an amax counts as zero: 127 / amax must stay finite in fp32 (2^-100 ~ 7.9e-31).
constexpr float kMinAmax = 7.88860905e-31f;

ECHO_HD float int8_scale(float amax) { return amax >= kMinAmax ? amax / 127.0f : 1.0f; }
ECHO_HD float int8_inv_scale(float amax) { return amax >= kMinAmax ? 127.0f / amax : 1.0f; }

ECHO_HD int32_t clamp_int8(int32_t q) { return q > kInt8Max ? kInt8Max : (q < -kInt8Max ? -kInt8Max : q); }

// floor(v) for |v| < 2^31 (truncate, then step down where truncation rounded up).
ECHO_HD int32_t floor_to_int(float v) {
  const int32_t t = static_cast<int32_t>(v);
  return t - (static_cast<float>(t) > v ? 1 : 0);
}

// RTNE int8 code of x with inv_scale = int8_inv_scale(amax of its row).
ECHO_HD int8_t quantize_rtne(float x, float inv_scale) {
  return static_cast<int8_t>(clamp_int8(round_to_int(mul_rn(x, inv_scale))));
}

// The S3R rounding rule on v = g' / Δ (|v| <= 127 up to rounding): clamp(floor(v + r)) with
// r in (0, 1), evaluated exactly. With r uniform over the 128 half-step codes, E[q] = v ± 1/256.
ECHO_HD int8_t round_stochastic(float v, float r) {
  const int32_t fl = floor_to_int(v);
  const float frac = v - static_cast<float>(fl);  // in [0, 1]
  return static_cast<int8_t>(clamp_int8(fl + (frac >= 1.0f - r ? 1 : 0)));
}

// ---- thresholds ---------------------------------------------------------------------------------

enum class ThresholdSharing : uint8_t { per_token, per_example, independent };

// One layer call's stream (see the design block for the counter layout).
struct ThresholdStream {
  PhiloxKey key{};
  uint32_t step = 0;
  uint32_t layer_site = 0;  // layer << 8 | site
  ThresholdSharing sharing = ThresholdSharing::per_token;
};

ECHO_HD uint32_t layer_site_word(uint32_t layer, uint32_t site) { return (layer << 8) | (site & 0xffu); }

constexpr uint32_t kPerExampleLane = 0xffffffffu;

// Code i % 16 of the 16 that one Philox call yields: byte i % 4 of word (i / 4) % 4.
ECHO_HD uint32_t threshold_code_of_call(const PhiloxOutput& w, uint64_t i) {
  return s3r_threshold_code(w.v[(i >> 2) & 3u], static_cast<int>(i & 3u));
}

// The Philox call holding the per_token codes of tokens 16·(token / 16) ... + 15.
ECHO_HD PhiloxOutput per_token_call(const ThresholdStream& s, uint64_t token) {
  return philox4x32_10(PhiloxCounter{{s.step, s.layer_site, static_cast<uint32_t>(token >> 4), 0u}}, s.key);
}

// The 7-bit code k (threshold R = (k + 0.5) / 128) of a token (per_token).
ECHO_HD uint32_t threshold_code_per_token(const ThresholdStream& s, uint64_t token) {
  return threshold_code_of_call(per_token_call(s, token), token);
}

// The code of an example (per_example).
ECHO_HD uint32_t threshold_code_per_example(const ThresholdStream& s, uint64_t example) {
  const PhiloxOutput w =
      philox4x32_10(PhiloxCounter{{s.step, s.layer_site, static_cast<uint32_t>(example), kPerExampleLane}}, s.key);
  return s3r_threshold_code(w.v[0], 0);
}

// The Philox call that serves global channels [16g, 16g + 16) of a token (independent): lane
// 1 + g of the token's counter (lane 0 is per_token's, kPerExampleLane per_example's).
ECHO_HD PhiloxOutput independent_call(const ThresholdStream& s, uint64_t token, uint64_t channel_group) {
  return philox4x32_10(
      PhiloxCounter{{s.step, s.layer_site, static_cast<uint32_t>(token), 1u + static_cast<uint32_t>(channel_group)}},
      s.key);
}

// The code of one element (independent): 16 channels share one Philox call.
ECHO_HD uint32_t threshold_code_independent(const ThresholdStream& s, uint64_t token, uint64_t channel) {
  return threshold_code_of_call(independent_call(s, token, channel >> 4), channel);
}

// R of element (token, channel) of example `example`, all GLOBAL indices.
ECHO_HD uint32_t threshold_code(const ThresholdStream& s, uint64_t token, uint64_t example, uint64_t channel) {
  switch (s.sharing) {
    case ThresholdSharing::per_token:
      return threshold_code_per_token(s, token);
    case ThresholdSharing::per_example:
      return threshold_code_per_example(s, example);
    default:
      return threshold_code_independent(s, token, channel);
  }
}

ECHO_HD float threshold_from_code(uint32_t code) { return (static_cast<float>(code) + 0.5f) * 0.0078125f; }

}  // namespace echo::quant
