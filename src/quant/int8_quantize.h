// The CPU loops of the INT8 linear layer around its GEMMs: per-row RTNE quantization of the
// forward operands, and the backward's scaled gradient G' and its once-computed codes Q by the
// chosen rounding rule (element math in s3r_math.h, shared with the CUDA kernels).
#pragma once

#include <cstdint>

#include "quant/s3r_math.h"

namespace echo::quant {

// amax[r] = max |x[r, :]|.   x: (rows, cols)  amax: (rows). A NaN or infinity is an error.
void row_absmax(const float* x, int64_t rows, int64_t cols, float* amax);

// q[r, :] = quantize_rtne(x[r, :], int8_inv_scale(amax[r])), scale[r] = int8_scale(amax[r]).
// x: (rows, cols)  amax, scale: (rows)  q: (rows, cols)
void quantize_rows_rtne(const float* x, int64_t rows, int64_t cols, const float* amax, int8_t* q, float* scale);

// g_scaled[t, h] = (g[t, h] * s_x[t]) * s_w[h] (G' = diag(s_x) G diag(s_w)); returns max |G'|.
// g, g_scaled: (rows, cols)  s_x: (rows)  s_w: (cols). A NaN or infinity is an error.
float scale_gradient(const float* g, const float* s_x, const float* s_w, int64_t rows, int64_t cols, float* g_scaled);

// How the backward rounds G'. Token, example and channel indices in the thresholds are global:
// local row t is token token_offset + t of example (token_offset + t) / seq_len, local column h
// is channel channel_offset + h.
struct GradientRounding {
  bool stochastic = false;  // false: RTNE (the stream is unused)
  ThresholdStream stream;
  int64_t token_offset = 0;
  int64_t channel_offset = 0;
  int64_t seq_len = 1;  // tokens per example (per_example thresholds)
};

// q = codes of G' / Δ by `rule`, Δ = int8_scale(g_amax), v = G' * int8_inv_scale(g_amax);
// e = Δ·q − G' (the rounding error in G' units) when e != nullptr.
// g_scaled, q, e: (rows, cols). g_amax = max |G'| over the whole tensor (all TP shards), finite.
void quantize_gradient(const float* g_scaled, int64_t rows, int64_t cols, float g_amax, const GradientRounding& rule,
                       int8_t* q, float* e);

}  // namespace echo::quant
