// Statistical properties of the S3R backward over many seeds (S3R paper §III-C/D, Table II):
// unbiasedness of every stochastic mode with the 1/sqrt(draws) convergence of its mean, and the
// ranking of the activation-gradient error variance on a layer whose W rows share a component:
// per_token S3R (no EC) > independent SR > per_token S3R-EC two_way.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <random>
#include <string>
#include <vector>

#include "quant/int8_linear.h"

namespace echo::quant {
namespace {

using config::BackwardRounding;
using config::EcMode;
using config::LinearMode;
using config::ThresholdMode;

struct Mode {
  const char* name;
  BackwardRounding rounding;
  ThresholdMode thresholds;
  EcMode ec;
};

struct Trial {
  int64_t rows, in, out, seq;
  std::vector<float> x, w, g;
  Int8LinearSaved saved;
  std::vector<double> dx_exact, dw_exact;  // the products with G' unrounded
};

// W rows = w_common + noise, X rows = x_common + noise: components shared by all output channels
// and by all tokens (0 gives an ordinary random layer).
Trial make_setup(int64_t rows, int64_t in, int64_t out, int64_t seq, float w_common, float x_common, uint32_t seed) {
  Trial s{rows, in, out, seq, {}, {}, {}, {}, {}, {}};
  std::mt19937 rng(seed);
  std::normal_distribution<float> n01(0.0f, 1.0f);
  std::vector<float> xc(in);
  for (auto& v : xc) v = x_common * n01(rng);
  s.x.resize(rows * in);
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t i = 0; i < in; ++i) s.x[t * in + i] = xc[i] + n01(rng);
  std::vector<float> c(in);
  for (auto& v : c) v = w_common * n01(rng);
  s.w.resize(out * in);
  for (int64_t h = 0; h < out; ++h)
    for (int64_t i = 0; i < in; ++i) s.w[h * in + i] = 0.05f * (c[i] + n01(rng));
  s.g.resize(rows * out);
  for (auto& v : s.g) v = 1e-3f * n01(rng);
  const Int8LinearConfig cfg{LinearMode::int8, BackwardRounding::rtne, ThresholdMode::per_token, EcMode::none, 0};
  std::vector<float> y(rows * out);
  linear_forward(cfg, {.seq_len = seq}, s.x.data(), s.w.data(), rows, in, out, y.data(), s.saved);
  // dX* = diag(s_x)^-1 G' Ŵ, dW* = diag(s_w)^-1 G'^T X̂ with G' = diag(s_x) G diag(s_w).
  s.dx_exact.assign(rows * in, 0.0);
  s.dw_exact.assign(out * in, 0.0);
  const auto& sv = s.saved;
  for (int64_t t = 0; t < rows; ++t)
    for (int64_t h = 0; h < out; ++h) {
      const double gp = double(s.g[t * out + h]) * host_span<float>(sv.s_x)[t] * host_span<float>(sv.s_w)[h];
      for (int64_t i = 0; i < in; ++i) {
        s.dx_exact[t * in + i] += gp * host_span<int8_t>(sv.w_q)[h * in + i] / host_span<float>(sv.s_x)[t];
        s.dw_exact[h * in + i] += gp * host_span<int8_t>(sv.x_q)[t * in + i] / host_span<float>(sv.s_w)[h];
      }
    }
  return s;
}

// One backward draw with run seed `seed` (the thresholds' Philox key).
void draw(const Trial& s, const Mode& m, uint64_t seed, std::vector<float>& dx, std::vector<float>& dw) {
  const Int8LinearConfig cfg{LinearMode::int8, m.rounding, m.thresholds, m.ec, seed};
  dx.assign(s.rows * s.in, 0.0f);
  dw.assign(s.out * s.in, 0.0f);
  linear_backward(cfg, {.step = 7, .layer = 2, .site = 1, .seq_len = s.seq}, s.g.data(), nullptr, nullptr, s.saved,
                  s.rows, s.in, s.out, dx.data(), false, dw.data());
}

double sum_sq(const std::vector<double>& v) {
  double s = 0.0;
  for (double x : v) s += x * x;
  return s;
}

// Squared deviation of the mean of `n` draws from the exact product, relative to its norm,
// averaged over `reps` disjoint groups of seeds starting at `seed0`: ~ variance / n.
struct Deviation {
  double dx, dw;
};
Deviation mean_deviation(const Trial& s, const Mode& m, int n, int reps, uint64_t seed0) {
  Deviation d{0, 0};
  std::vector<float> dx, dw;
  for (int r = 0; r < reps; ++r) {
    std::vector<double> mx(s.dx_exact.size(), 0.0), mw(s.dw_exact.size(), 0.0);
    for (int k = 0; k < n; ++k) {
      draw(s, m, seed0 + uint64_t(r) * n + k, dx, dw);
      for (size_t i = 0; i < mx.size(); ++i) mx[i] += dx[i];
      for (size_t i = 0; i < mw.size(); ++i) mw[i] += dw[i];
    }
    for (size_t i = 0; i < mx.size(); ++i) mx[i] = mx[i] / n - s.dx_exact[i];
    for (size_t i = 0; i < mw.size(); ++i) mw[i] = mw[i] / n - s.dw_exact[i];
    d.dx += sum_sq(mx) / sum_sq(s.dx_exact) / reps;
    d.dw += sum_sq(mw) / sum_sq(s.dw_exact) / reps;
  }
  return d;
}

// The mean over draws converges to the exact-quantized product like 1/sqrt(draws): the RMS
// deviation at 64 draws is ~4x the one at 1024 (RTNE, deterministic and biased, stays put).
TEST(S3rStatisticsTest, StochasticModesAreUnbiasedAndConvergeLikeOneOverSqrtN) {
  const Trial s = make_setup(32, 24, 48, 2, 0.0f, 0.0f, 101);  // 16 examples of 2 tokens
  const Mode modes[] = {{"s3r per_token", BackwardRounding::s3r, ThresholdMode::per_token, EcMode::none},
                        {"s3r per_example", BackwardRounding::s3r, ThresholdMode::per_example, EcMode::none},
                        {"sr_independent", BackwardRounding::sr_independent, ThresholdMode::per_token, EcMode::none},
                        {"s3r per_token two_way", BackwardRounding::s3r, ThresholdMode::per_token, EcMode::two_way}};
  std::printf("%-24s %14s %14s %10s %10s\n", "mode", "rms dev dX@64", "rms dev dX@1k", "ratio dX", "ratio dW");
  for (const Mode& m : modes) {
    const Deviation small = mean_deviation(s, m, 64, 32, 1000);
    const Deviation large = mean_deviation(s, m, 1024, 4, 1000000);
    const double rx = std::sqrt(small.dx / large.dx), rw = std::sqrt(small.dw / large.dw);
    std::printf("%-24s %14.3e %14.3e %10.2f %10.2f\n", m.name, std::sqrt(small.dx), std::sqrt(large.dx), rx, rw);
    EXPECT_NEAR(rx, 4.0, 0.8) << m.name;
    EXPECT_NEAR(rw, 4.0, 0.8) << m.name;
    // And the mean is close: at 1024 draws the relative deviation is small.
    EXPECT_LT(std::sqrt(large.dx), 0.05) << m.name;
    EXPECT_LT(std::sqrt(large.dw), 0.05) << m.name;
  }
  const Mode rtne{"rtne", BackwardRounding::rtne, ThresholdMode::per_token, EcMode::none};
  const Deviation a = mean_deviation(s, rtne, 4, 1, 1), b = mean_deviation(s, rtne, 16, 1, 1);
  EXPECT_DOUBLE_EQ(a.dx, b.dx);  // no convergence: this is what a biased rule looks like
  EXPECT_GT(a.dx, 0.0);
}

// Table II's ordering on a synthetic layer whose W rows share a common component, so the column
// sums of Ŵ grow like the width: the error shared by a token's channels (per-token thresholds)
// adds up along them in dX; S3R-EC removes it and ends below independent SR. The tokens share a
// component too, so per_example sharing (one threshold per example) shows up in dW, where the
// tokens of an example add up, and needs the dW half of the correction (two_way).
TEST(S3rStatisticsTest, ActivationGradientVarianceRanksAsTableII) {
  const Trial s = make_setup(64, 32, 96, 8, 1.0f, 1.0f, 202);
  const Mode modes[] = {{"s3r per_token", BackwardRounding::s3r, ThresholdMode::per_token, EcMode::none},
                        {"sr_independent", BackwardRounding::sr_independent, ThresholdMode::per_token, EcMode::none},
                        {"s3r per_token two_way", BackwardRounding::s3r, ThresholdMode::per_token, EcMode::two_way},
                        {"s3r per_token dx_only", BackwardRounding::s3r, ThresholdMode::per_token, EcMode::dx_only},
                        {"s3r per_example", BackwardRounding::s3r, ThresholdMode::per_example, EcMode::none},
                        {"s3r per_example two_way", BackwardRounding::s3r, ThresholdMode::per_example, EcMode::two_way}};
  constexpr int kDraws = 200;
  std::vector<double> var_dx, var_dw;
  std::printf("%-26s %16s %16s   (error variance over %d seeds, relative to |exact|^2)\n", "mode", "dX", "dW",
              kDraws);
  std::vector<float> dx, dw;
  for (const Mode& m : modes) {
    double ex = 0.0, ew = 0.0;
    for (int k = 0; k < kDraws; ++k) {
      draw(s, m, 5000 + k, dx, dw);
      for (size_t i = 0; i < dx.size(); ++i) ex += std::pow(dx[i] - s.dx_exact[i], 2);
      for (size_t i = 0; i < dw.size(); ++i) ew += std::pow(dw[i] - s.dw_exact[i], 2);
    }
    var_dx.push_back(ex / kDraws / sum_sq(s.dx_exact));
    var_dw.push_back(ew / kDraws / sum_sq(s.dw_exact));
    std::printf("%-26s %16.4e %16.4e\n", m.name, var_dx.back(), var_dw.back());
  }
  EXPECT_GT(var_dx[0], 1.5 * var_dx[1]) << "per_token S3R must be noisier than independent SR in dX";
  EXPECT_LT(var_dx[2], var_dx[1]) << "S3R-EC two_way must beat independent SR in dX";
  EXPECT_LT(var_dx[3], var_dx[1]) << "dx_only corrects dX like two_way";
  EXPECT_NEAR(var_dw[0], var_dw[1], 0.3 * var_dw[1]) << "per-token sharing keeps the dW variance of independent SR";
  EXPECT_LT(var_dw[2], var_dw[1]) << "two_way also centres the dW error";
  EXPECT_GT(var_dw[4], 1.5 * var_dw[0]) << "per_example sharing adds up over an example's tokens in dW";
  EXPECT_LT(var_dx[5], var_dx[1]);
  EXPECT_LT(var_dw[5], var_dw[1]) << "per_example needs the dW half of the correction";
}

}  // namespace
}  // namespace echo::quant
