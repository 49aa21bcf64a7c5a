// The Echo compensator over a real multi-rank QAR: Eqn. (4), Theorem 1, Eqn. (21), the
// coherent-vs-independent growth without compensation, and backward rescaling.
#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <vector>

#include "../support/test_data.h"
#include "comm/echo/echo_all_reduce.h"
#include "core/error.h"
#include "dist/communicator.h"

namespace echo::comm {
namespace {

using echo::testing::random_normal;

dist::Communicator world() { return dist::Communicator::borrow(MPI_COMM_WORLD); }

EchoOptions echo_options(float eta, bool telemetry = true) {
  EchoOptions opt;
  opt.quant = {QuantPolicy::asym_zero_aware, 4, 128};
  opt.coeffs.eta = eta;
  opt.telemetry = telemetry;
  return opt;
}

struct StreamResult {
  double max_partial_sum = 0;  // max_t ‖S_t‖
  double q = 0;                // max_k ‖δ_k‖
};

// Feeds N sites of one forward pass. coherent: the same contribution at every site (errors
// add up linearly without compensation); otherwise fresh random contributions per site.
// ‖S_t‖ and ‖δ_k‖ come from the all-reduce outputs ŷ_k alone, against sums the test forms in
// double from every rank's regenerated contribution: ρ_k = ŷ_k - Σ_r x_{k,r}, S_t = Σ_{k≤t} ρ_k,
// δ_k = ŷ_k - Σ_r x'_{k,r}, with x' = x + c from a double model of Eqns. (10)-(11) per rank, fed
// the same ŷ. The implementation's telemetry must agree with these numbers.
StreamResult run_stream(const dist::Communicator& comm, float eta, int num_sites, bool coherent, size_t n = 4096) {
  EchoAllReduce ar(comm, echo_options(eta));
  ar.begin_pass(Direction::forward);
  const int P = comm.size();
  const CompensatorCoeffs k = ar.compensator(Direction::forward).coeffs();
  std::vector<std::vector<double>> m1(P, std::vector<double>(n, 0.0)), m2 = m1;
  std::vector<double> partial_sum(n, 0.0), sum_x(n), sum_xc(n);
  std::vector<std::vector<float>> fixed(P);  // coherent: every site's contributions
  if (coherent)
    for (int rank = 0; rank < P; ++rank) fixed[rank] = random_normal(n, 99, rank, 0.2f);
  auto contribution = [&](int site, int rank) {
    return coherent ? fixed[rank] : random_normal(n, 1000 + site, rank, 0.2f);
  };
  StreamResult r;
  for (int site = 0; site < num_sites; ++site) {
    auto y = contribution(site, comm.rank());
    ar.all_reduce(y, {site, Direction::forward});
    std::fill(sum_x.begin(), sum_x.end(), 0.0);
    std::fill(sum_xc.begin(), sum_xc.end(), 0.0);
    for (int rank = 0; rank < P; ++rank) {
      const auto x = contribution(site, rank);
      for (size_t i = 0; i < n; ++i) {
        const double xc = x[i] + k.eta * (k.a * m1[rank][i] + (1.0 - k.a) * m2[rank][i]);
        const double u = xc - double(y[i]) / P;
        m1[rank][i] = k.beta1 * m1[rank][i] + (1.0 - k.beta1) * u;
        m2[rank][i] = k.beta2 * m2[rank][i] + (1.0 - k.beta2) * u;
        sum_x[i] += x[i];
        sum_xc[i] += xc;
      }
    }
    double s2 = 0, d2 = 0;
    for (size_t i = 0; i < n; ++i) {
      partial_sum[i] += y[i] - sum_x[i];
      s2 += partial_sum[i] * partial_sum[i];
      d2 += (y[i] - sum_xc[i]) * (y[i] - sum_xc[i]);
    }
    r.max_partial_sum = std::max(r.max_partial_sum, std::sqrt(s2));
    r.q = std::max(r.q, std::sqrt(d2));
    const SiteTelemetry& t = ar.telemetry(Direction::forward).at(site);
    EXPECT_NEAR(t.partial_sum_norm, std::sqrt(s2), 1e-3 * std::sqrt(s2)) << "telemetry ‖S_t‖ at site " << site;
    EXPECT_NEAR(t.delta_norm, std::sqrt(d2), 1e-3 * std::sqrt(d2)) << "telemetry ‖δ_k‖ at site " << site;
  }
  return r;
}

TEST(Compensator, ResidualsSumToMinusTheInjectedError_Eqn4) {
  auto comm = world();
  const size_t n = 3000;
  EchoAllReduce ar(comm, echo_options(0.75f, false));
  ar.begin_pass(Direction::forward);
  auto x = random_normal(n, 3, comm.rank(), 0.5f);
  const auto x_in = x;
  ar.all_reduce(x, {0, Direction::forward});
  // At the first site of a pass c = 0, so x' = x and m1 = (1 - β1)·u.
  const auto& comp = ar.compensator(Direction::forward);
  const double beta1 = comp.coeffs().beta1;
  std::vector<double> local(2 * n), total(2 * n);
  for (size_t i = 0; i < n; ++i) {
    local[i] = comp.m1()[i] / (1.0 - beta1);  // u_i
    local[n + i] = x_in[i];
  }
  MPI_Allreduce(local.data(), total.data(), static_cast<int>(2 * n), MPI_DOUBLE, MPI_SUM, comm.get());
  double max_delta = 0, max_dev = 0;
  for (size_t i = 0; i < n; ++i) {
    const double delta = x[i] - total[n + i];  // ŷ - Σ x'
    max_delta = std::max(max_delta, std::fabs(delta));
    max_dev = std::max(max_dev, std::fabs(total[i] + delta));
  }
  EXPECT_GT(max_delta, 1e-3) << "4-bit QAR should inject a visible error";
  EXPECT_LT(max_dev, 1e-5 * comm.size()) << "Σ u must equal -δ up to fp32 rounding";
}

TEST(Compensator, Theorem1_FullGainBoundsThePartialSumAtAnyDepth) {
  auto comm = world();
  const double mu_w = mean_return_age(CompensatorCoeffs{});
  EXPECT_NEAR(mu_w, 1.095, 1e-3);
  for (bool coherent : {true, false}) {
    for (int num_sites : {8, 32, 128, 256}) {
      const auto r = run_stream(comm, 1.0f, num_sites, coherent);
      ASSERT_GT(r.q, 0);
      const double ratio = r.max_partial_sum / r.q;
      if (comm.rank() == 0)
        std::printf("eta=1 %s N=%3d  max|S|/q = %.3f (bound %.3f)\n", coherent ? "coherent   " : "independent", num_sites,
                    ratio, 1 + mu_w);
      EXPECT_LE(ratio, 1.0 + mu_w) << (coherent ? "coherent" : "independent") << " N=" << num_sites;
    }
  }
}

TEST(Compensator, WithoutCompensationCoherentErrorsGrowLinearlyAndIndependentOnesLikeSqrtN) {
  auto comm = world();
  for (int num_sites : {8, 32, 128}) {
    const auto r = run_stream(comm, 0.0f, num_sites, true);
    const double ratio = r.max_partial_sum / r.q;
    if (comm.rank() == 0) std::printf("eta=0 coherent    N=%3d  max|S|/q = %.3f\n", num_sites, ratio);
    EXPECT_NEAR(ratio, num_sites, 0.02 * num_sites) << "identical inputs inject identical errors";
  }
  const auto r8 = run_stream(comm, 0.0f, 8, false);
  const auto r128 = run_stream(comm, 0.0f, 128, false);
  const double g8 = r8.max_partial_sum / r8.q, g128 = r128.max_partial_sum / r128.q;
  if (comm.rank() == 0) std::printf("eta=0 independent N=8: %.3f  N=128: %.3f\n", g8, g128);
  EXPECT_GT(g8, 1.5);
  EXPECT_GT(g128 / g8, 2.5) << "sqrt(128/8) = 4";
  EXPECT_LT(g128 / g8, 6.0);
  EXPECT_LT(g128, 0.25 * 128) << "independent errors do not add coherently";
}

// The independent NumPy model of the compensator, tests/comm/compensator_numpy_model.py (its own
// ctest checks that it reproduces these constants; P = 4, b = 4, g = 128, 4096 elements, inputs
// Normal(mean 0.2, std 1) as random_normal(n, seed, rank, 0.2f) draws them, max_t ‖S_t‖ /
// max_k ‖δ_k‖): independent errors at η = 0 give 2.75, 5.44, 10.74, 15.08 for N = 8, 32, 128, 256
// (the model, mean of 8 seeds: 2.755, 5.473, 10.866, 15.254) and about 1.1 at η = 1; coherent
// errors at η = 0 give exactly N, and 1.3-1.6 at η = 1. Asserted within 10 %.
TEST(Compensator, PartialSumsMatchTheIndependentNumPyModel) {
  auto comm = world();
  const int sites[] = {8, 32, 128, 256};
  const double independent_eta0[] = {2.75, 5.44, 10.74, 15.08};
  for (int i = 0; i < 4; ++i) {
    const int N = sites[i];
    const auto r0 = run_stream(comm, 0.0f, N, false), r1 = run_stream(comm, 1.0f, N, false);
    const auto c0 = run_stream(comm, 0.0f, N, true), c1 = run_stream(comm, 1.0f, N, true);
    const double i0 = r0.max_partial_sum / r0.q, i1 = r1.max_partial_sum / r1.q;
    const double k0 = c0.max_partial_sum / c0.q, k1 = c1.max_partial_sum / c1.q;
    if (comm.rank() == 0)
      std::printf("P=%d N=%3d  independent: eta=0 %.3f (NumPy %.2f)  eta=1 %.3f (~1.1)   coherent: eta=0 %.3f  "
                  "eta=1 %.3f\n",
                  comm.size(), N, i0, independent_eta0[i], i1, k0, k1);
    EXPECT_NEAR(i0, independent_eta0[i], 0.1 * independent_eta0[i]) << "independent, eta = 0, N = " << N;
    EXPECT_NEAR(i1, 1.1, 0.11) << "independent, eta = 1, N = " << N;
    EXPECT_NEAR(k0, N, 1e-9 * N) << "coherent, eta = 0: the same error N times";
    EXPECT_GE(k1, 1.1 * 0.9) << "coherent, eta = 1, N = " << N;
    EXPECT_LE(k1, 1.6 * 1.1) << "coherent, eta = 1, N = " << N;
  }
}

TEST(Compensator, Eqn21_PartialGainBound) {
  auto comm = world();
  const double mu_w = mean_return_age(CompensatorCoeffs{});
  for (float eta : {0.25f, 0.5f, 0.75f}) {
    for (int num_sites : {16, 64}) {
      const auto r = run_stream(comm, eta, num_sites, true);
      const double bound = (1.0 - eta) * num_sites + eta * (1.0 + mu_w);
      const double ratio = r.max_partial_sum / r.q;
      if (comm.rank() == 0)
        std::printf("eta=%.2f coherent N=%2d  max|S|/q = %.3f (bound %.3f)\n", eta, num_sites, ratio, bound);
      EXPECT_LE(ratio, bound) << "eta=" << eta << " N=" << num_sites;
      EXPECT_GT(ratio, 0.5 * (1.0 - eta) * num_sites) << "the uncorrected share 1-eta still accumulates";
    }
  }
}

TEST(Compensator, StateIsPerDirectionAndResetEveryPass) {
  auto comm = world();
  EchoAllReduce ar(comm, echo_options(0.75f, false));
  ar.begin_pass(Direction::forward);
  auto x = random_normal(512, 8, comm.rank());
  auto first = x;
  ar.all_reduce(first, {0, Direction::forward});
  auto second = x;
  ar.all_reduce(second, {1, Direction::forward});
  EXPECT_NE(std::memcmp(first.data(), second.data(), 512 * sizeof(float)), 0) << "site 1 carries a correction";
  // Starting a backward pass leaves the forward state alone: each direction has its own pair.
  ar.begin_pass(Direction::backward);
  const auto m1 = ar.compensator(Direction::forward).m1();
  EXPECT_TRUE(std::any_of(m1.begin(), m1.end(), [](float v) { return v != 0.0f; }));
  ar.begin_pass(Direction::forward);
  auto again = x;
  ar.all_reduce(again, {0, Direction::forward});
  EXPECT_EQ(std::memcmp(first.data(), again.data(), 512 * sizeof(float)), 0) << "a new pass starts from zero state";
  auto wrong = random_normal(256, 9, comm.rank());
  EXPECT_THROW(ar.all_reduce(wrong, {1, Direction::forward}), Error) << "sizes may not change within a pass";
}

TEST(BackwardRescale, TinyGradientsSurviveWithItAndUnderflowWithout) {
  auto comm = world();
  const size_t n = 2048;
  for (bool rescale : {true, false}) {
    EchoOptions opt = echo_options(0.0f, false);
    opt.backward_rescale = rescale;
    EchoAllReduce ar(comm, opt);
    ar.begin_pass(Direction::backward);
    auto g = random_normal(n, 17, comm.rank(), 0.0f, 3e-8f);  // |g| up to ~1e-7
    std::vector<double> exact(n, 0.0);
    for (int r = 0; r < comm.size(); ++r) {
      const auto gr = random_normal(n, 17, r, 0.0f, 3e-8f);
      for (size_t i = 0; i < n; ++i) exact[i] += gr[i];
    }
    ar.all_reduce(g, {0, Direction::backward});
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < n; ++i) err2 += (g[i] - exact[i]) * (g[i] - exact[i]), ref2 += exact[i] * exact[i];
    const double rel = std::sqrt(err2 / ref2);
    if (rescale)
      EXPECT_LT(rel, 0.2) << "with rescaling 4-bit QAR keeps 1e-7 gradients";
    else
      EXPECT_GT(rel, 0.9) << "without rescaling the fp16 group scale underflows";
  }
}

// gmax anywhere in the float range: all zeros, denormals (e = 11 - ex > 127, so 2^e alone would
// overflow to inf and 0·inf is NaN), 2^-120 (e = 130) and 2^100 (e = -90). The output is the
// exact sum up to the 4-bit quantization error, and an all-zero gradient stays exactly zero.
TEST(BackwardRescale, GradientsOfAnyFiniteMagnitudeAreScaledExactly) {
  auto comm = world();
  const size_t n = 1024;
  const float magnitudes[] = {0.0f, 1e-40f, std::ldexp(1.0f, -120), std::ldexp(1.0f, 100)};
  for (float magnitude : magnitudes) {
    EchoAllReduce ar(comm, echo_options(0.0f, false));
    ar.begin_pass(Direction::backward);
    auto contribution = [&](int rank) {
      auto v = random_normal(n, 23, rank);
      for (float& x : v) x *= magnitude;  // rounded to the denormal grid at 1e-40: the reference sums these
      return v;
    };
    auto g = contribution(comm.rank());
    if (magnitude > 0.0f) g[3] = 0.0f;  // zeros among the values: 0·2^e must stay 0
    std::vector<double> exact(n, 0.0);
    for (int r = 0; r < comm.size(); ++r) {
      auto gr = contribution(r);
      if (magnitude > 0.0f) gr[3] = 0.0f;
      for (size_t i = 0; i < n; ++i) exact[i] += gr[i];
    }
    ASSERT_NO_THROW(ar.all_reduce(g, {0, Direction::backward})) << "magnitude " << magnitude;
    double err2 = 0, ref2 = 0;
    for (size_t i = 0; i < n; ++i) {
      ASSERT_TRUE(std::isfinite(g[i])) << "magnitude " << magnitude << " element " << i;
      err2 += (g[i] - exact[i]) * (g[i] - exact[i]), ref2 += exact[i] * exact[i];
    }
    if (magnitude == 0.0f) {
      EXPECT_EQ(err2, 0.0) << "zeros sum to zeros";
    } else {
      EXPECT_EQ(g[3], 0.0f) << "magnitude " << magnitude;
      EXPECT_LT(std::sqrt(err2 / ref2), 0.2) << "magnitude " << magnitude;
    }
  }
}

TEST(BackwardRescale, ChangesNothingForValuesThatDoNotUnderflow) {
  auto comm = world();
  for (float magnitude : {1.0f, 3e-3f, 40.0f}) {
    EchoOptions with = echo_options(0.75f, false), without = with;
    without.backward_rescale = false;
    EchoAllReduce a(comm, with), b(comm, without);
    a.begin_pass(Direction::backward);
    b.begin_pass(Direction::backward);
    for (int k = 0; k < 4; ++k) {
      auto x = random_normal(1500, 40 + k, comm.rank(), 0.1f * magnitude, magnitude);
      auto y = x;
      a.all_reduce(x, {k, Direction::backward});
      b.all_reduce(y, {k, Direction::backward});
      ASSERT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0)
          << "magnitude " << magnitude << " site " << k << ": a power-of-two rescale is exact";
    }
  }
}

TEST(EchoAllReduce, DisabledDirectionUsesTheExact16BitAllReduce) {
  auto comm = world();
  EchoOptions opt = echo_options(0.75f, false);
  opt.forward = false;
  EchoAllReduce ar(comm, opt);
  ExactAllReduce exact(comm, ExactPrecision::bf16);
  ar.begin_pass(Direction::forward);
  auto x = random_normal(777, 1, comm.rank());
  auto y = x;
  ar.all_reduce(x, {0, Direction::forward});
  exact.all_reduce(y, {0, Direction::forward});
  EXPECT_EQ(std::memcmp(x.data(), y.data(), x.size() * sizeof(float)), 0);
  EXPECT_EQ(ar.wire_bytes_per_rank(777, {0, Direction::forward}), exact.wire_bytes_per_rank(777, {0, Direction::forward}));
}

TEST(EchoAllReduce, TelemetryLinesAreJson) {
  SiteTelemetry t{{3, Direction::backward}, 4, 12, 0.5, 10.0, 0.75};
  const std::string line = to_json_line(t, 42);
  EXPECT_EQ(line,
            R"({"bits":4,"delta_norm":0.5,"direction":"backward","kind":"echo_site","partial_sum_norm":0.75,)"
            R"("rescale_exponent":12,"site":3,"step":42,"x_norm":10.0})");
}

}  // namespace
}  // namespace echo::comm
