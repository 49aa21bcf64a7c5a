// The INT8 linear layer: forward by hand, the backward's algebra against double references built
// from its own codes (which also pins the orientation of s_x and s_w), S3R-EC's residual and
// corrections, the bf16 baseline and the accumulate contract of the model's linear helpers.
#include "quant/int8_linear.h"

#include <gtest/gtest.h>

#include <cmath>
#include <random>
#include <vector>

#include "backend/ops.h"
#include "core/error.h"
#include "quant/error_correction.h"

namespace echo::quant {
namespace {

using config::BackwardRounding;
using config::EcMode;
using config::LinearMode;
using config::ThresholdMode;

std::vector<float> random_vec(int64_t n, uint32_t seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> d(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = d(rng);
  return v;
}

Int8LinearConfig make_config(BackwardRounding r, ThresholdMode t, EcMode ec, uint64_t seed = 1) {
  return {LinearMode::int8, r, t, ec, seed};
}

// Relative closeness over a whole tensor: max |a - b| <= tol * max |b|.
void expect_close(const std::vector<double>& ref, const float* got, double tol, const char* what) {
  double m = 0.0, err = 0.0;
  for (size_t i = 0; i < ref.size(); ++i) {
    m = std::max(m, std::abs(ref[i]));
    err = std::max(err, std::abs(ref[i] - double(got[i])));
  }
  EXPECT_LE(err, tol * m) << what << ": max error " << err << " vs max |ref| " << m;
}

TEST(Int8LinearTest, ForwardRtneByHand) {
  // X row 0 has amax 127 (s_x = 1), row 1 is all zero (s_x = 1, codes 0). W row 0 has amax 254
  // (s_w = 2, codes x / 2 rounded to even), row 1 amax 1 (s_w = 1/127, codes 127).
  const float x[] = {127, 2.5f, -3.5f, 0.5f, -126.5f, 1.5f, 0, 0, 0, 0, 0, 0};
  const float w[] = {254, 5, -7, 3, 1, -1, 1, 1, 1, 1, 1, 1};
  float y[4];
  Int8LinearSaved saved;
  linear_forward(make_config(BackwardRounding::rtne, ThresholdMode::per_token, EcMode::none), {}, x, w, 2, 6, 2, y,
                 saved);
  const std::vector<int8_t> xq = {127, 2, -4, 0, -126, 2, 0, 0, 0, 0, 0, 0};
  const std::vector<int8_t> wq = {127, 2, -4, 2, 0, 0, 127, 127, 127, 127, 127, 127};
  EXPECT_EQ(saved.x_q.to_vector<int8_t>(), xq);
  EXPECT_EQ(saved.w_q.to_vector<int8_t>(), wq);
  EXPECT_EQ(saved.s_x.to_vector<float>(), (std::vector<float>{1.0f, 1.0f}));
  EXPECT_EQ(host_span<float>(saved.s_w)[0], 2.0f);
  EXPECT_FLOAT_EQ(host_span<float>(saved.s_w)[1], 1.0f / 127.0f);
  // y00 = 1 * 2 * (127*127 + 2*2 + 4*4 + 0 + 0 + 0) = 32298; y01 = (127 + 2 - 4 + 0 - 126 + 2) * 127 / 127 = 1.
  EXPECT_EQ(y[0], 32298.0f);
  EXPECT_FLOAT_EQ(y[1], 1.0f);
  EXPECT_EQ(y[2], 0.0f);
  EXPECT_EQ(y[3], 0.0f);
}

struct Layer {
  int64_t rows, in, out;
  std::vector<float> x, w, g;
};

Layer random_layer(int64_t rows, int64_t in, int64_t out, uint32_t seed) {
  return {rows, in, out, random_vec(rows * in, seed), random_vec(out * in, seed + 1, 0.05f),
          random_vec(rows * out, seed + 2, 1e-3f)};
}

// Forward: y is the product of the dequantized operands, and RTNE is within half a step.
TEST(Int8LinearTest, ForwardIsTheDequantizedProduct) {
  const Layer L = random_layer(10, 37, 23, 5);
  std::vector<float> y(L.rows * L.out);
  Int8LinearSaved s;
  linear_forward(make_config(BackwardRounding::s3r, ThresholdMode::per_token, EcMode::two_way), {}, L.x.data(),
                 L.w.data(), L.rows, L.in, L.out, y.data(), s);
  std::vector<double> ref(L.rows * L.out, 0.0);
  for (int64_t t = 0; t < L.rows; ++t)
    for (int64_t h = 0; h < L.out; ++h)
      for (int64_t i = 0; i < L.in; ++i)
        ref[t * L.out + h] += double(host_span<float>(s.s_x)[t]) * host_span<int8_t>(s.x_q)[t * L.in + i] * double(host_span<float>(s.s_w)[h]) * host_span<int8_t>(s.w_q)[h * L.in + i];
  expect_close(ref, y.data(), 1e-6, "forward");
  for (int64_t t = 0; t < L.rows; ++t)
    for (int64_t i = 0; i < L.in; ++i)
      EXPECT_LE(std::abs(L.x[t * L.in + i] - host_span<float>(s.s_x)[t] * host_span<int8_t>(s.x_q)[t * L.in + i]), 0.5001f * host_span<float>(s.s_x)[t]);
}

struct BackwardResult {
  std::vector<float> dx, dw;
  Int8BackwardTrace trace;
  Int8LinearSaved saved;
};

BackwardResult run(const Layer& L, const Int8LinearConfig& cfg, LinearContext ctx) {
  BackwardResult r;
  std::vector<float> y(L.rows * L.out);
  linear_forward(cfg, ctx, L.x.data(), L.w.data(), L.rows, L.in, L.out, y.data(), r.saved);
  r.dx.assign(L.rows * L.in, 0.0f);
  r.dw.assign(L.out * L.in, 0.0f);
  linear_backward(cfg, ctx, L.g.data(), L.x.data(), L.w.data(), r.saved, L.rows, L.in, L.out, r.dx.data(), false,
                  r.dw.data(), &r.trace);
  return r;
}

// dX = diag(s_x)^-1 · (Σ_h M[t, h] Ŵ[h, :]), dW = diag(s_w)^-1 · (Σ_t M[t, h] X̂[t, :]) for a (rows, out) M.
void products(const Layer& L, const Int8LinearSaved& s, const std::vector<double>& m, std::vector<double>& dx,
              std::vector<double>& dw) {
  dx.assign(L.rows * L.in, 0.0);
  dw.assign(L.out * L.in, 0.0);
  for (int64_t t = 0; t < L.rows; ++t)
    for (int64_t h = 0; h < L.out; ++h) {
      const double v = m[t * L.out + h];
      for (int64_t i = 0; i < L.in; ++i) {
        dx[t * L.in + i] += v * host_span<int8_t>(s.w_q)[h * L.in + i] / host_span<float>(s.s_x)[t];
        dw[h * L.in + i] += v * host_span<int8_t>(s.x_q)[t * L.in + i] / host_span<float>(s.s_w)[h];
      }
    }
}

TEST(Int8LinearTest, BackwardAlgebraAndOrientation) {
  const Layer L = random_layer(12, 19, 29, 8);
  for (auto rounding : {BackwardRounding::rtne, BackwardRounding::sr_independent, BackwardRounding::s3r}) {
    const auto cfg = make_config(rounding, ThresholdMode::per_token, EcMode::none);
    const BackwardResult r = run(L, cfg, {.seq_len = 4});
    const auto& s = r.saved;
    const float delta = r.trace.delta;
    EXPECT_EQ(delta, r.trace.g_amax / 127.0f);
    // G' = diag(s_x)·G·diag(s_w), its max is 127 Δ, and the codes round it by the rule.
    double gmax = 0.0;
    std::vector<double> dq(L.rows * L.out), gp(L.rows * L.out);
    for (int64_t t = 0; t < L.rows; ++t)
      for (int64_t h = 0; h < L.out; ++h) {
        const int64_t k = t * L.out + h;
        gp[k] = double(L.g[k]) * host_span<float>(s.s_x)[t] * host_span<float>(s.s_w)[h];
        EXPECT_NEAR(r.trace.g_scaled[k], gp[k], 1e-6 * std::abs(gp[k]));
        gmax = std::max(gmax, std::abs(gp[k]));
        dq[k] = double(delta) * r.trace.q[k];
        EXPECT_LE(std::abs(dq[k] - gp[k]), (rounding == BackwardRounding::rtne ? 0.5001 : 1.0001) * delta);
        EXPECT_NEAR(r.trace.e[k], dq[k] - r.trace.g_scaled[k], 1e-6 * std::max(std::abs(dq[k]), double(delta)));
      }
    EXPECT_NEAR(r.trace.g_amax, gmax, 1e-6 * gmax);
    std::vector<double> rdx, rdw;
    products(L, s, dq, rdx, rdw);
    expect_close(rdx, r.dx.data(), 1e-6, "dX = diag(s_x)^-1 Δ Q Ŵ");
    expect_close(rdw, r.dw.data(), 1e-6, "dW = diag(s_w)^-1 Δ Q^T X̂");
    // With G' unrounded the products are the exact gradients of the dequantized layer:
    // dX = G · (diag(s_w) Ŵ), dW = G^T · (diag(s_x) X̂).
    std::vector<double> edx, edw, gdx(L.rows * L.in, 0.0), gdw(L.out * L.in, 0.0);
    products(L, s, gp, edx, edw);
    for (int64_t t = 0; t < L.rows; ++t)
      for (int64_t h = 0; h < L.out; ++h)
        for (int64_t i = 0; i < L.in; ++i) {
          gdx[t * L.in + i] += double(L.g[t * L.out + h]) * host_span<float>(s.s_w)[h] * host_span<int8_t>(s.w_q)[h * L.in + i];
          gdw[h * L.in + i] += double(L.g[t * L.out + h]) * host_span<float>(s.s_x)[t] * host_span<int8_t>(s.x_q)[t * L.in + i];
        }
    for (size_t i = 0; i < gdx.size(); ++i) EXPECT_NEAR(edx[i], gdx[i], 1e-9 + 1e-6 * std::abs(gdx[i]));
    for (size_t i = 0; i < gdw.size(); ++i) EXPECT_NEAR(edw[i], gdw[i], 1e-9 + 1e-6 * std::abs(gdw[i]));
  }
}

// two_way: the remaining error E - E^str sums to zero along every row and column of each
// example, and the corrected gradients are the products of ΔQ - E^str exactly. dx_only corrects
// dX the same way and leaves dW as without EC.
TEST(Int8LinearTest, TwoWayCorrectionRemovesRowAndColumnMeans) {
  const Layer L = random_layer(12, 21, 18, 13);  // 3 examples of 4 tokens
  const LinearContext ctx{.step = 3, .layer = 1, .site = 2, .seq_len = 4};
  for (auto thresholds : {ThresholdMode::per_token, ThresholdMode::per_example}) {
    const BackwardResult two = run(L, make_config(BackwardRounding::s3r, thresholds, EcMode::two_way), ctx);
    const BackwardResult dxo = run(L, make_config(BackwardRounding::s3r, thresholds, EcMode::dx_only), ctx);
    const BackwardResult none = run(L, make_config(BackwardRounding::s3r, thresholds, EcMode::none), ctx);
    EXPECT_EQ(two.trace.q, none.trace.q);  // EC changes no code
    const StructuredError es = structured_error(two.trace.e.data(), L.rows, L.out, 4);
    std::vector<double> str(L.rows * L.out), resid(L.rows * L.out), corrected(L.rows * L.out);
    structured_error_matrix(es, str.data());
    double emax = 0.0;
    for (size_t k = 0; k < str.size(); ++k) {
      resid[k] = double(two.trace.e[k]) - str[k];
      corrected[k] = double(two.trace.delta) * two.trace.q[k] - str[k];
      emax = std::max(emax, std::abs(double(two.trace.e[k])));
    }
    ASSERT_GT(emax, 0.0);
    for (int64_t t = 0; t < L.rows; ++t) {
      double s = 0.0;
      for (int64_t h = 0; h < L.out; ++h) s += resid[t * L.out + h];
      EXPECT_NEAR(s, 0.0, 1e-12 * emax * L.out) << "row " << t;
    }
    for (int64_t b = 0; b < 3; ++b)
      for (int64_t h = 0; h < L.out; ++h) {
        double s = 0.0;
        for (int64_t t = 4 * b; t < 4 * b + 4; ++t) s += resid[t * L.out + h];
        EXPECT_NEAR(s, 0.0, 1e-12 * emax * 4) << "example " << b << " column " << h;
      }
    // E^str is not trivially zero: the correction moves the gradients.
    double moved = 0.0;
    for (size_t i = 0; i < two.dx.size(); ++i) moved = std::max(moved, double(std::abs(two.dx[i] - none.dx[i])));
    EXPECT_GT(moved, 0.0);
    std::vector<double> rdx, rdw;
    products(L, two.saved, corrected, rdx, rdw);
    expect_close(rdx, two.dx.data(), 1e-6, "two_way dX");
    expect_close(rdw, two.dw.data(), 1e-6, "two_way dW");
    expect_close(rdx, dxo.dx.data(), 1e-6, "dx_only dX");
    EXPECT_EQ(dxo.dw, none.dw);
  }
}

// The contract of the model's linear_dx / linear_dw: dx overwritten or accumulated, dw accumulated.
TEST(Int8LinearTest, AccumulatesLikeTheModelsHelpers) {
  const Layer L = random_layer(8, 11, 9, 21);
  for (auto mode : {LinearMode::bf16, LinearMode::int8}) {
    auto cfg = make_config(BackwardRounding::s3r, ThresholdMode::per_token, EcMode::two_way);
    cfg.mode = mode;
    const LinearContext ctx{.seq_len = 2};
    const BackwardResult base = run(L, cfg, ctx);
    std::vector<float> dx(L.rows * L.in, 0.5f), dw(L.out * L.in, -0.25f);
    linear_backward(cfg, ctx, L.g.data(), L.x.data(), L.w.data(), base.saved, L.rows, L.in, L.out, dx.data(), true,
                    dw.data());
    for (size_t i = 0; i < dx.size(); ++i) EXPECT_FLOAT_EQ(dx[i], 0.5f + base.dx[i]);
    for (size_t i = 0; i < dw.size(); ++i) EXPECT_FLOAT_EQ(dw[i], -0.25f + base.dw[i]);
    linear_backward(cfg, ctx, L.g.data(), L.x.data(), L.w.data(), base.saved, L.rows, L.in, L.out, dx.data(), false,
                    nullptr);
    for (size_t i = 0; i < dx.size(); ++i) EXPECT_EQ(dx[i], base.dx[i]);
  }
}

TEST(Int8LinearTest, Bf16ModeIsThePlainFp32Layer) {
  const Layer L = random_layer(7, 13, 5, 31);
  auto cfg = make_config(BackwardRounding::s3r, ThresholdMode::per_token, EcMode::two_way);
  cfg.mode = LinearMode::bf16;
  const BackwardResult r = run(L, cfg, {});
  std::vector<float> y(L.rows * L.out), ry(L.rows * L.out), rdx(L.rows * L.in), rdw(L.out * L.in, 0.0f);
  Int8LinearSaved s;
  linear_forward(cfg, {}, L.x.data(), L.w.data(), L.rows, L.in, L.out, y.data(), s);
  cpu::gemm<float>(false, true, L.rows, L.out, L.in, 1.0f, L.x.data(), L.w.data(), 0.0f, ry.data());
  cpu::gemm<float>(false, false, L.rows, L.in, L.out, 1.0f, L.g.data(), L.w.data(), 0.0f, rdx.data());
  cpu::gemm<float>(true, false, L.out, L.in, L.rows, 1.0f, L.g.data(), L.x.data(), 1.0f, rdw.data());
  EXPECT_EQ(y, ry);
  EXPECT_EQ(r.dx, rdx);
  EXPECT_EQ(r.dw, rdw);
  EXPECT_FALSE(s.x_q.defined());
}

TEST(Int8LinearTest, PreconditionsAreChecked) {
  const Layer L = random_layer(6, 4, 3, 41);
  std::vector<float> y(L.rows * L.out);
  Int8LinearSaved s;
  const auto ec = make_config(BackwardRounding::s3r, ThresholdMode::per_token, EcMode::two_way);
  std::vector<float> dx(6 * 4), dw(3 * 4);
  linear_forward(ec, {}, L.x.data(), L.w.data(), 6, 4, 3, y.data(), s);
  // EC needs whole examples.
  for (const LinearContext bad : {LinearContext{}, LinearContext{.seq_len = 4}, LinearContext{.token_offset = 1, .seq_len = 3}})
    EXPECT_THROW(linear_backward(ec, bad, L.g.data(), nullptr, nullptr, s, 6, 4, 3, dx.data(), false, dw.data()),
                 Error);
  // A sharded call needs its reducer; a site must fit in 8 bits.
  EXPECT_THROW(linear_forward(ec, {.seq_len = 3, .tp_style = TpStyle::row}, L.x.data(), L.w.data(), 6, 4, 3, y.data(),
                              s),
               Error);
  EXPECT_THROW(linear_forward(ec, {.site = 256, .seq_len = 3}, L.x.data(), L.w.data(), 6, 4, 3, y.data(), s), Error);
  // backward must match its forward's shape.
  EXPECT_THROW(linear_backward(ec, {.seq_len = 3}, L.g.data(), nullptr, nullptr, s, 3, 4, 3, dx.data(), false,
                               dw.data()),
               Error);
  // RTNE without EC needs no examples.
  const auto plain = make_config(BackwardRounding::rtne, ThresholdMode::per_token, EcMode::none);
  EXPECT_NO_THROW(linear_forward(plain, {}, L.x.data(), L.w.data(), 6, 4, 3, y.data(), s));
}

}  // namespace
}  // namespace echo::quant
