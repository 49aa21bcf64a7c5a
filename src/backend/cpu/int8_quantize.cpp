// CPU loops over the element math of s3r_math.h; inner loops are branch-free so GCC vectorizes them.
// NOTE: the hot loops are cloned for AVX2 (chosen at load time from cpuid) because the x86-64
// baseline (SSE2) has no int32 min/max, so GCC leaves the clamps scalar there. Every clone does
// the same IEEE operations element by element, so the codes are identical whichever one runs.
// Not AVX-512F: GCC turns on FMA with it and contracts a * b + c (it does so in C++ even in ISO
// mode), which would change the rounding of x * inv_scale + 1.5 * 2^23 and of Δ·q − G'.
#include "quant/int8_quantize.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

#include "core/error.h"

namespace echo::quant {

#define ECHO_QUANT_CLONES [[gnu::target_clones("avx2", "default")]]

namespace {

// max |x[0..n)|, or NaN when x holds a NaN or an infinity. Sixteen independent lanes let the
// loop vectorize without reassociation flags; a NaN or an infinity turns its lane of v * 0 into NaN.
ECHO_QUANT_CLONES float absmax(const float* x, int64_t n) {
  constexpr int kLanes = 16;
  float m[kLanes] = {}, z[kLanes] = {};
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes)
    for (int j = 0; j < kLanes; ++j) {
      const float a = std::fabs(x[i + j]);
      m[j] = a > m[j] ? a : m[j];
      z[j] += x[i + j] * 0.0f;
    }
  for (; i < n; ++i) {
    const float a = std::fabs(x[i]);
    m[0] = a > m[0] ? a : m[0];
    z[0] += x[i] * 0.0f;
  }
  float r = 0.0f, bad = 0.0f;
  for (int j = 0; j < kLanes; ++j) {
    r = m[j] > r ? m[j] : r;
    bad += z[j];
  }
  return bad == 0.0f ? r : std::numeric_limits<float>::quiet_NaN();
}

ECHO_QUANT_CLONES void rtne_row(const float* x, int64_t cols, float inv, int8_t* q) {
  for (int64_t c = 0; c < cols; ++c) q[c] = quantize_rtne(x[c], inv);
}

ECHO_QUANT_CLONES void error_row(const float* g, const int8_t* q, int64_t cols, float delta, float* e) {
  for (int64_t h = 0; h < cols; ++h) e[h] = mul_rn(delta, static_cast<float>(q[h])) - g[h];
}

ECHO_QUANT_CLONES void scale_row(const float* g, float sx, const float* s_w, int64_t cols, float* out) {
  for (int64_t h = 0; h < cols; ++h) out[h] = mul_rn(mul_rn(g[h], sx), s_w[h]);
}

// One row of codes with per-element thresholds r, then its error.
ECHO_QUANT_CLONES void round_row(const float* g, int64_t cols, float inv, float delta, const float* r, int8_t* q,
                                 float* e) {
  for (int64_t h = 0; h < cols; ++h) q[h] = round_stochastic(mul_rn(g[h], inv), r[h]);
  if (e) error_row(g, q, cols, delta, e);
}

}  // namespace

void row_absmax(const float* x, int64_t rows, int64_t cols, float* amax) {
  for (int64_t r = 0; r < rows; ++r) {
    amax[r] = absmax(x + r * cols, cols);
    ECHO_RUN_CHECK(std::isfinite(amax[r]), "int8 linear: row {} of an operand holds a NaN or an infinity", r);
  }
}

void quantize_rows_rtne(const float* x, int64_t rows, int64_t cols, const float* amax, int8_t* q, float* scale) {
  for (int64_t r = 0; r < rows; ++r) {
    const float inv = int8_inv_scale(amax[r]);
    scale[r] = int8_scale(amax[r]);
    rtne_row(x + r * cols, cols, inv, q + r * cols);
  }
}

float scale_gradient(const float* g, const float* s_x, const float* s_w, int64_t rows, int64_t cols, float* g_scaled) {
  float m = 0.0f;
  for (int64_t t = 0; t < rows; ++t) {
    float* out = g_scaled + t * cols;
    scale_row(g + t * cols, s_x[t], s_w, cols, out);
    const float a = absmax(out, cols);
    m = a <= m ? m : a;  // a NaN replaces m and then stays: NaN <= m and m < NaN are both false
    if (std::isnan(m)) break;
  }
  ECHO_RUN_CHECK(std::isfinite(m), "int8 linear backward: the output gradient holds a NaN or an infinity");
  return m;
}

void quantize_gradient(const float* g_scaled, int64_t rows, int64_t cols, float g_amax, const GradientRounding& rule,
                       int8_t* q, float* e) {
  ECHO_CHECK(std::isfinite(g_amax) && g_amax >= 0.0f, "quantize_gradient: max |G'| = {} is not a finite amax", g_amax);
  ECHO_CHECK(rule.seq_len >= 1 && rule.token_offset >= 0 && rule.channel_offset >= 0,
             "quantize_gradient: seq_len {} must be >= 1 and the offsets ({}, {}) >= 0", rule.seq_len,
             rule.token_offset, rule.channel_offset);
  const float inv = int8_inv_scale(g_amax), delta = int8_scale(g_amax);
  if (!rule.stochastic) {
    for (int64_t t = 0; t < rows; ++t) {
      rtne_row(g_scaled + t * cols, cols, inv, q + t * cols);
      if (e) error_row(g_scaled + t * cols, q + t * cols, cols, delta, e + t * cols);
    }
    return;
  }
  std::vector<float> r(cols);
  PhiloxOutput call{};  // per_token: the Philox call of the current 16-token group
  uint64_t call_group = ~uint64_t{0};
  for (int64_t t = 0; t < rows; ++t) {
    const uint64_t token = static_cast<uint64_t>(rule.token_offset + t);
    const uint64_t example = token / static_cast<uint64_t>(rule.seq_len);
    switch (rule.stream.sharing) {
      case ThresholdSharing::per_token:
        if (token >> 4 != call_group) {
          call = per_token_call(rule.stream, token);
          call_group = token >> 4;
        }
        std::fill(r.begin(), r.end(), threshold_from_code(threshold_code_of_call(call, token)));
        break;
      case ThresholdSharing::per_example:
        std::fill(r.begin(), r.end(), threshold_from_code(threshold_code_per_example(rule.stream, example)));
        break;
      case ThresholdSharing::independent: {
        // One Philox call per 16 global channels; a shard may start mid-group.
        for (int64_t h = 0; h < cols;) {
          const uint64_t ch = static_cast<uint64_t>(rule.channel_offset + h);
          const PhiloxOutput w = independent_call(rule.stream, token, ch >> 4);
          for (uint64_t lane = ch & 15u; lane < 16 && h < cols; ++lane, ++h)
            r[h] = threshold_from_code(threshold_code_of_call(w, lane));
        }
        break;
      }
    }
    round_row(g_scaled + t * cols, cols, inv, delta, r.data(), q + t * cols, e ? e + t * cols : nullptr);
  }
}

}  // namespace echo::quant
