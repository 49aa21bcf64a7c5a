// The linear layer's forward and backward: checks, TP reductions, and the order of the steps
// (quantize, int8 GEMM, rescale, error correction). The arithmetic lives in int8_quantize,
// int8_gemm and error_correction.
#include "quant/int8_linear.h"

#include <memory>
#include <span>

#include "backend/ops.h"
#include "core/error.h"
#include "core/stopwatch.h"
#include "quant/error_correction.h"
#include "quant/int8_gemm.h"
#include "quant/int8_quantize.h"

namespace echo::quant {

namespace {

using config::EcMode;
using config::LinearMode;

// An uninitialized buffer for GEMM outputs (every element is written; zeroing would be wasted).
std::unique_ptr<int32_t[]> int32_buffer(int64_t n) { return std::unique_ptr<int32_t[]>(new int32_t[n]); }

// Max-reduces floats over TP through the reducer's doubles (exact: floats round-trip).
void max_over_tp(const backend::TpReducer& tp, float* v, int64_t n) {
  std::vector<double> d(v, v + n);
  tp.max(std::span<double>(d));
  for (int64_t i = 0; i < n; ++i) v[i] = static_cast<float>(d[i]);
}

void check_common(const LinearContext& ctx, int64_t rows, int64_t in, int64_t out) {
  ECHO_CHECK(rows >= 0 && in >= 1 && out >= 1, "linear: bad shape rows={} in={} out={}", rows, in, out);
  ECHO_CHECK(ctx.site < 256 && ctx.layer < (1u << 24), "linear: site {} must be < 256 and layer {} < 2^24", ctx.site,
             ctx.layer);
  ECHO_CHECK(ctx.token_offset >= 0 && ctx.channel_offset >= 0, "linear: offsets must be >= 0, got token {} channel {}",
             ctx.token_offset, ctx.channel_offset);
  ECHO_CHECK(ctx.tp_style == TpStyle::none || ctx.tp != nullptr, "linear: a column/row-parallel call needs a reducer");
}

// EC groups the rows by example and per_example thresholds index examples: rows must be whole ones.
void check_examples(const Int8LinearConfig& cfg, const LinearContext& ctx, int64_t rows) {
  const bool needs_examples = cfg.mode == LinearMode::int8 &&
                              (cfg.ec != EcMode::none || (cfg.stochastic() && cfg.sharing() == ThresholdSharing::per_example));
  if (needs_examples)
    ECHO_CHECK(ctx.seq_len >= 1 && rows % ctx.seq_len == 0 && ctx.token_offset % ctx.seq_len == 0,
               "linear: EC and per_example thresholds need whole examples: {} rows at token offset {} with seq_len {}",
               rows, ctx.token_offset, ctx.seq_len);
}

}  // namespace

ThresholdSharing Int8LinearConfig::sharing() const {
  if (rounding == config::BackwardRounding::sr_independent) return ThresholdSharing::independent;
  switch (thresholds) {
    case config::ThresholdMode::per_token:
      return ThresholdSharing::per_token;
    case config::ThresholdMode::per_example:
      return ThresholdSharing::per_example;
    default:
      return ThresholdSharing::independent;
  }
}

void linear_forward(const Int8LinearConfig& cfg, const LinearContext& ctx, const float* x, const float* w,
                    int64_t rows, int64_t in, int64_t out, float* y, Int8LinearSaved& saved, LinearTimes* times) {
  check_common(ctx, rows, in, out);
  ECHO_CHECK(x && w && y, "linear_forward: null operand");
  Stopwatch sw;
  if (cfg.mode == LinearMode::bf16) {
    cpu::gemm<float>(false, true, rows, out, in, 1.0f, x, w, 0.0f, y);
    sw.lap_into(times ? &times->gemm : nullptr);
    return;
  }
  const bool reduce = ctx.tp_style == TpStyle::row;
  saved.rows = rows, saved.in = in, saved.out = out;
  saved.x_q = Tensor::empty({rows, in}, DType::i8);
  saved.s_x = Tensor::empty({rows}, DType::f32);
  saved.w_q = Tensor::empty({out, in}, DType::i8);
  saved.s_w = Tensor::empty({out}, DType::f32);
  int8_t* x_q = saved.x_q.data<int8_t>();
  int8_t* w_q = saved.w_q.data<int8_t>();
  float* s_x = saved.s_x.data<float>();
  float* s_w = saved.s_w.data<float>();
  std::vector<float> amax_x(rows), amax_w(out);
  row_absmax(x, rows, in, amax_x.data());
  row_absmax(w, out, in, amax_w.data());
  if (reduce) {
    max_over_tp(*ctx.tp, amax_x.data(), rows);
    max_over_tp(*ctx.tp, amax_w.data(), out);
  }
  quantize_rows_rtne(x, rows, in, amax_x.data(), x_q, s_x);
  quantize_rows_rtne(w, out, in, amax_w.data(), w_q, s_w);
  sw.lap_into(times ? &times->quantize : nullptr);

  const auto acc = int32_buffer(rows * out);
  gemm_s8s32(false, true, rows, out, in, x_q, w_q, acc.get());
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t h = 0; h < out; ++h)
      y[t * out + h] = mul_rn(mul_rn(static_cast<float>(acc[t * out + h]), s_x[t]), s_w[h]);
  sw.lap_into(times ? &times->gemm : nullptr);
}

void linear_backward(const Int8LinearConfig& cfg, const LinearContext& ctx, const float* dy, const float* x,
                     const float* w, const Int8LinearSaved& saved, int64_t rows, int64_t in, int64_t out, float* dx,
                     bool accumulate_dx, float* dw_accum, Int8BackwardTrace* trace) {
  check_common(ctx, rows, in, out);
  check_examples(cfg, ctx, rows);
  ECHO_CHECK(dy != nullptr, "linear_backward: null output gradient");
  LinearTimes* times = trace ? &trace->times : nullptr;
  Stopwatch sw;
  if (cfg.mode == LinearMode::bf16) {
    ECHO_CHECK((!dx || w) && (!dw_accum || x), "linear_backward (bf16) needs the forward's x and w");
    if (dx) cpu::gemm<float>(false, false, rows, in, out, 1.0f, dy, w, accumulate_dx ? 1.0f : 0.0f, dx);
    if (dw_accum) cpu::gemm<float>(true, false, out, in, rows, 1.0f, dy, x, 1.0f, dw_accum);
    sw.lap_into(times ? &times->gemm : nullptr);
    return;
  }
  ECHO_CHECK(saved.rows == rows && saved.in == in && saved.out == out,
             "linear_backward: saved forward is ({}, {}, {}), the call is ({}, {}, {})", saved.rows, saved.in,
             saved.out, rows, in, out);

  const int8_t* x_q = saved.x_q.data<int8_t>();
  const int8_t* w_q = saved.w_q.data<int8_t>();
  const float* s_x = saved.s_x.data<float>();
  const float* s_w = saved.s_w.data<float>();
  // G', Δ (max over the whole layer: column shards hold part of the channels), Q and E, once.
  std::vector<float> g_scaled(rows * out);
  float g_amax = scale_gradient(dy, s_x, s_w, rows, out, g_scaled.data());
  if (ctx.tp_style == TpStyle::column) max_over_tp(*ctx.tp, &g_amax, 1);
  GradientRounding rule;
  rule.stochastic = cfg.stochastic();
  rule.stream = ThresholdStream{philox_key(cfg.seed), ctx.step, layer_site_word(ctx.layer, ctx.site), cfg.sharing()};
  rule.token_offset = ctx.token_offset;
  rule.channel_offset = ctx.channel_offset;
  rule.seq_len = ctx.seq_len >= 1 ? ctx.seq_len : 1;
  const bool want_e = cfg.ec != EcMode::none || (trace && trace->keep_tensors);
  std::vector<int8_t> q(rows * out);
  std::vector<float> e(want_e ? rows * out : 0);
  quantize_gradient(g_scaled.data(), rows, out, g_amax, rule, q.data(), want_e ? e.data() : nullptr);
  const float delta = int8_scale(g_amax);
  sw.lap_into(times ? &times->quantize : nullptr);

  if (dx) {  // dX = diag(s_x)^-1 · (Δ · Q·Ŵ)
    const auto acc = int32_buffer(rows * in);
    gemm_s8s32(false, false, rows, in, out, q.data(), w_q, acc.get());
    for (int64_t t = 0; t < rows; ++t) {
      const float sx = s_x[t];
      for (int64_t i = 0; i < in; ++i) {
        const float v = mul_rn(delta, static_cast<float>(acc[t * in + i])) / sx;
        dx[t * in + i] = accumulate_dx ? dx[t * in + i] + v : v;
      }
    }
  }
  if (dw_accum) {  // dW = diag(s_w)^-1 · (Δ · Q^T·X̂)
    const auto acc = int32_buffer(out * in);
    gemm_s8s32(true, false, out, in, rows, q.data(), x_q, acc.get());
    for (int64_t h = 0; h < out; ++h) {
      const float swh = s_w[h];
      for (int64_t i = 0; i < in; ++i) dw_accum[h * in + i] += mul_rn(delta, static_cast<float>(acc[h * in + i])) / swh;
    }
  }
  sw.lap_into(times ? &times->gemm : nullptr);

  if (cfg.ec != EcMode::none && rows > 0) {
    const auto* sum_over_tp = ctx.tp_style == TpStyle::column ? &ctx.tp->sum : nullptr;
    const StructuredError es = structured_error(e.data(), rows, out, ctx.seq_len, sum_over_tp);
    if (dx) correct_dx(es, w_q, s_x, in, dx);
    if (dw_accum && cfg.ec == EcMode::two_way) correct_dw(es, x_q, s_w, in, dw_accum);
    sw.lap_into(times ? &times->ec : nullptr);
  }

  if (trace) {
    trace->g_amax = g_amax;
    trace->delta = delta;
    if (trace->keep_tensors) {
      trace->g_scaled = std::move(g_scaled);
      trace->q = std::move(q);
      trace->e = std::move(e);
    }
  }
}

}  // namespace echo::quant
