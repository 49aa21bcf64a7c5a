// Gradient checks of the CPU ops: every backward against central finite differences in double
// of a random linear functional L = sum(R * out) (for cross-entropy, of the loss itself), on
// several small shapes; gemm against a naive triple loop for all four transpose combinations.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

#include "backend/ops.h"
#include "core/error.h"
#include "ops_test_util.h"

namespace echo::cpu {
namespace {

using testing::expect_close;
using testing::random_ints;
using testing::random_vec;

constexpr uint64_t kSeed = 20240611;
constexpr double kStep = 1e-5;  // central-difference step (inputs are O(1))
constexpr double kRtol = 1e-6;
constexpr double kAtol = 1e-8;  // for gradients near zero; FD round-off is ~1e-10 here

double dot(const std::vector<double>& a, const std::vector<double>& b) {
  double s = 0.0;
  for (size_t i = 0; i < a.size(); ++i) s += a[i] * b[i];
  return s;
}

// Largest |analytic - numeric| / (atol + rtol |numeric|) over x, the numeric gradient taken by
// central differences of loss() while x[i] moves by +-kStep (x is restored). <= 1 passes.
double fd_violation(std::vector<double>& x, const std::vector<double>& analytic, const std::function<double()>& loss,
                    std::string* worst) {
  double violation = 0.0;
  for (size_t i = 0; i < x.size(); ++i) {
    const double saved = x[i];
    x[i] = saved + kStep;
    const double up = loss();
    x[i] = saved - kStep;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * kStep);
    const double ratio = std::abs(analytic[i] - numeric) / (kAtol + kRtol * std::abs(numeric));
    if (!(ratio <= violation)) {
      violation = ratio;
      std::ostringstream os;
      os << "element " << i << ": analytic " << analytic[i] << ", numeric " << numeric;
      *worst = os.str();
    }
  }
  return violation;
}

void expect_grad(const std::string& what, std::vector<double>& x, const std::vector<double>& analytic,
                 const std::function<double()>& loss) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  std::string worst;
  EXPECT_LE(fd_violation(x, analytic, loss, &worst), 1.0) << what << " " << worst;
}

// ---- gemm ---------------------------------------------------------------------------------------

template <class T>
void check_gemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, double alpha, double beta, double rtol) {
  const uint64_t s = static_cast<uint64_t>(m * 10000 + n * 100 + k) * 4 + ta * 2 + tb;
  const auto a = random_vec(m * k, kSeed, s);
  const auto b = random_vec(k * n, kSeed, s + 1);
  const auto c0 = random_vec(m * n, kSeed, s + 2);
  std::vector<double> ref(m * n);
  double scale = 0.0;  // bound on the magnitudes summed, for the float tolerance
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      long double acc = 0, mag = 0;
      for (int64_t p = 0; p < k; ++p) {
        const double av = ta ? a[p * m + i] : a[i * k + p];
        const double bv = tb ? b[j * k + p] : b[p * n + j];
        acc += static_cast<long double>(av) * bv;
        mag += std::abs(static_cast<long double>(av) * bv);
      }
      ref[i * n + j] = static_cast<double>(alpha * acc + beta * c0[i * n + j]);
      scale = std::max(scale, static_cast<double>(std::abs(alpha) * mag + std::abs(beta * c0[i * n + j])));
    }
  const auto at = testing::cast_vec<T>(a);
  const auto bt = testing::cast_vec<T>(b);
  // Inputs in T: compare against the reference of the T-rounded inputs when T = float.
  std::vector<double> ref_t = ref;
  if constexpr (std::is_same_v<T, float>) {
    for (int64_t i = 0; i < m; ++i)
      for (int64_t j = 0; j < n; ++j) {
        long double acc = 0;
        for (int64_t p = 0; p < k; ++p)
          acc += static_cast<long double>(at[ta ? p * m + i : i * k + p]) * bt[tb ? j * k + p : p * n + j];
        ref_t[i * n + j] =
            static_cast<double>(static_cast<long double>(static_cast<T>(alpha)) * acc +
                                static_cast<long double>(static_cast<T>(beta)) * static_cast<T>(c0[i * n + j]));
      }
  }
  auto c = testing::cast_vec<T>(c0);
  gemm<T>(ta, tb, m, n, k, static_cast<T>(alpha), at.data(), bt.data(), static_cast<T>(beta), c.data());
  std::ostringstream what;
  what << "gemm<" << (sizeof(T) == 4 ? "float" : "double") << "> ta " << ta << " tb " << tb << " m " << m << " n " << n
       << " k " << k;
  expect_close(c, ref_t, 0.0, rtol * std::max(scale, 1.0), what.str());
}

TEST(GemmTest, MatchesNaiveTripleLoopAllTransposes) {
  const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 4}, {7, 2, 9}, {4, 6, 1}, {16, 9, 33}};
  for (const auto& s : shapes)
    for (int ta = 0; ta < 2; ++ta)
      for (int tb = 0; tb < 2; ++tb) {
        check_gemm<double>(ta, tb, s[0], s[1], s[2], 0.7, -0.3, 1e-14);
        check_gemm<float>(ta, tb, s[0], s[1], s[2], 0.7, -0.3, 1e-6);
        check_gemm<double>(ta, tb, s[0], s[1], s[2], 1.0, 0.0, 1e-14);
        check_gemm<float>(ta, tb, s[0], s[1], s[2], 1.0, 0.0, 1e-6);
      }
}

TEST(GemmTest, BetaZeroOverwritesWithoutReadingC) {
  const auto a = random_vec(6, kSeed, 901), b = random_vec(6, kSeed, 902);
  std::vector<double> c(4, std::numeric_limits<double>::quiet_NaN());
  gemm<double>(false, false, 2, 2, 3, 1.0, a.data(), b.data(), 0.0, c.data());
  for (int i = 0; i < 2; ++i)
    for (int j = 0; j < 2; ++j)
      EXPECT_DOUBLE_EQ(c[i * 2 + j], a[i * 3] * b[j] + a[i * 3 + 1] * b[2 + j] + a[i * 3 + 2] * b[4 + j]);
}

TEST(GemmTest, KZeroScalesC) {
  std::vector<double> c = {1.0, -2.0, 3.0, 4.5};
  const double dummy = 0.0;
  gemm<double>(false, true, 2, 2, 0, 1.0, &dummy, &dummy, 0.5, c.data());
  EXPECT_EQ(c, (std::vector<double>{0.5, -1.0, 1.5, 2.25}));
}

TEST(GemmTest, StridedSubMatrixLeavesTheRestAlone) {
  // A: rows 4 apart, 3 used columns; C: rows 5 apart, 2 used columns.
  const int64_t m = 3, n = 2, k = 3, lda = 4, ldb = 2, ldc = 5;
  const auto a = random_vec(m * lda, kSeed, 903), b = random_vec(k * ldb, kSeed, 904);
  auto c = random_vec(m * ldc, kSeed, 905);
  const auto c0 = c;
  gemm_strided<double>(false, false, m, n, k, 1.0, a.data(), lda, b.data(), ldb, 0.0, c.data(), ldc);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < ldc; ++j) {
      if (j >= n) {
        EXPECT_EQ(c[i * ldc + j], c0[i * ldc + j]);
        continue;
      }
      double ref = 0;
      for (int64_t p = 0; p < k; ++p) ref += a[i * lda + p] * b[p * ldb + j];
      EXPECT_NEAR(c[i * ldc + j], ref, 1e-14);
    }
}

TEST(GemmTest, RejectsBadShapes) {
  double x = 1.0;
  EXPECT_THROW(gemm<double>(false, false, -1, 1, 1, 1.0, &x, &x, 0.0, &x), echo::Error);
  EXPECT_THROW(gemm_strided<double>(false, false, 2, 2, 2, 1.0, &x, 1, &x, 2, 0.0, &x, 2), echo::Error);
}

// ---- RMSNorm ------------------------------------------------------------------------------------

TEST(RmsNormGradTest, MatchesFiniteDifferences) {
  const int64_t shapes[][2] = {{1, 1}, {1, 8}, {3, 2}, {4, 16}, {2, 7}};
  for (double eps : {1e-6, 0.3}) {
    for (const auto& s : shapes) {
      const int64_t rows = s[0], dim = s[1];
      const uint64_t st = static_cast<uint64_t>(rows * 100 + dim);
      auto x = random_vec(rows * dim, kSeed, st);
      auto w = random_vec(dim, kSeed, st + 1);
      const auto r = random_vec(rows * dim, kSeed, st + 2);
      std::vector<double> out(rows * dim), rstd(rows);
      auto loss = [&] {
        rmsnorm_forward<double>(x.data(), w.data(), rows, dim, eps, out.data(), rstd.data());
        return dot(r, out);
      };
      loss();
      std::vector<double> dx(rows * dim, 123.0);
      const auto dw0 = random_vec(dim, kSeed, st + 3);  // dw accumulates onto whatever is there
      auto dw = dw0;
      rmsnorm_backward<double>(r.data(), x.data(), w.data(), rstd.data(), rows, dim, dx.data(), dw.data());
      for (int64_t i = 0; i < dim; ++i) dw[i] -= dw0[i];
      const std::string what =
          "rmsnorm rows " + std::to_string(rows) + " dim " + std::to_string(dim) + " eps " + std::to_string(eps);
      expect_grad(what + " dx", x, dx, loss);
      expect_grad(what + " dw", w, dw, loss);
    }
  }
}

// ---- RoPE ---------------------------------------------------------------------------------------

TEST(RopeGradTest, BackwardIsTheTransposeOfForward) {
  const int64_t shapes[][3] = {{1, 1, 2}, {3, 2, 8}, {4, 3, 4}, {2, 1, 2}};
  for (double base : {10000.0, 1e6}) {
    for (const auto& s : shapes) {
      const int64_t tokens = s[0], heads = s[1], hd = s[2];
      const uint64_t st = static_cast<uint64_t>(tokens * 1000 + heads * 10 + hd);
      auto x = random_vec(tokens * heads * hd, kSeed, st);
      const auto r = random_vec(x.size(), kSeed, st + 1);
      const auto pos = random_ints(tokens, kSeed, st + 2, 0, 5000);
      auto loss = [&] {
        auto y = x;
        rope_forward<double>(y.data(), pos.data(), tokens, heads, hd, base);
        return dot(r, y);
      };
      auto dx = r;
      rope_backward<double>(dx.data(), pos.data(), tokens, heads, hd, base);
      expect_grad("rope tokens " + std::to_string(tokens) + " heads " + std::to_string(heads) + " head_dim " +
                      std::to_string(hd),
                  x, dx, loss);
    }
  }
}

// ---- Attention ----------------------------------------------------------------------------------

struct AttnShape {
  int64_t batch, seq, n_q, n_kv, d;
};

TEST(AttentionGradTest, MatchesFiniteDifferences) {
  const AttnShape shapes[] = {
      {1, 1, 1, 1, 2},  // single token, single head
      {1, 1, 3, 1, 8},  // seq = 1, GQA
      {2, 3, 4, 1, 2},  // n_kv = 1 (multi-query), head_dim 2
      {1, 4, 2, 2, 8},  // n_kv = n_q (multi-head)
      {2, 5, 4, 2, 8},  // GQA group 2, batch 2
      {1, 6, 6, 3, 2},
  };
  for (const auto& s : shapes) {
    const uint64_t st = static_cast<uint64_t>(s.batch * 10000 + s.seq * 1000 + s.n_q * 100 + s.n_kv * 10 + s.d);
    const int64_t nq_elems = s.batch * s.seq * s.n_q * s.d;
    const int64_t nkv_elems = s.batch * s.seq * s.n_kv * s.d;
    auto q = random_vec(nq_elems, kSeed, st);
    auto k = random_vec(nkv_elems, kSeed, st + 1);
    auto v = random_vec(nkv_elems, kSeed, st + 2);
    const auto r = random_vec(nq_elems, kSeed, st + 3);
    std::vector<double> out(nq_elems), lse(s.batch * s.n_q * s.seq);
    auto loss = [&] {
      attention_forward<double>(q.data(), k.data(), v.data(), s.batch, s.seq, s.n_q, s.n_kv, s.d, out.data(),
                                lse.data());
      return dot(r, out);
    };
    loss();
    std::vector<double> dq(nq_elems, 7.0), dk(nkv_elems, 7.0), dv(nkv_elems, 7.0);  // overwritten
    attention_backward<double>(r.data(), q.data(), k.data(), v.data(), out.data(), lse.data(), s.batch, s.seq, s.n_q,
                               s.n_kv, s.d, dq.data(), dk.data(), dv.data());
    std::ostringstream os;
    os << "attention batch " << s.batch << " seq " << s.seq << " n_q " << s.n_q << " n_kv " << s.n_kv << " d " << s.d;
    expect_grad(os.str() + " dq", q, dq, loss);
    expect_grad(os.str() + " dk", k, dk, loss);
    expect_grad(os.str() + " dv", v, dv, loss);
  }
}

// ---- SwiGLU -------------------------------------------------------------------------------------

TEST(SwigluGradTest, MatchesFiniteDifferences) {
  for (int64_t n : {1, 7, 33}) {
    auto gate = random_vec(n, kSeed, 300 + n, 3.0);  // wide spread: both tails of the sigmoid
    auto up = random_vec(n, kSeed, 400 + n);
    const auto r = random_vec(n, kSeed, 500 + n);
    std::vector<double> out(n);
    auto loss = [&] {
      swiglu_forward<double>(gate.data(), up.data(), n, out.data());
      return dot(r, out);
    };
    std::vector<double> dgate(n), dup(n);
    swiglu_backward<double>(r.data(), gate.data(), up.data(), n, dgate.data(), dup.data());
    expect_grad("swiglu n " + std::to_string(n) + " dgate", gate, dgate, loss);
    expect_grad("swiglu n " + std::to_string(n) + " dup", up, dup, loss);
  }
}

// The checker must be able to fail: a gradient off by 1e-4 relative in one element is caught.
TEST(SwigluGradTest, CheckerCatchesASmallError) {
  const int64_t n = 9;
  auto gate = random_vec(n, kSeed, 601), up = random_vec(n, kSeed, 602);
  const auto r = random_vec(n, kSeed, 603);
  std::vector<double> out(n), dgate(n), dup(n);
  auto loss = [&] {
    swiglu_forward<double>(gate.data(), up.data(), n, out.data());
    return dot(r, out);
  };
  swiglu_backward<double>(r.data(), gate.data(), up.data(), n, dgate.data(), dup.data());
  std::string worst;
  EXPECT_LE(fd_violation(gate, dgate, loss, &worst), 1.0) << worst;
  dgate[4] *= 1.0 + 1e-4;
  EXPECT_GT(fd_violation(gate, dgate, loss, &worst), 1.0);
}

// ---- Embedding ----------------------------------------------------------------------------------

TEST(EmbeddingGradTest, MatchesFiniteDifferences) {
  struct Case {
    int64_t n, vocab_begin, vocab_local, hidden;
  };
  const Case cases[] = {{1, 0, 1, 1}, {6, 0, 4, 3}, {9, 3, 5, 2}, {12, 8, 4, 5}};
  for (const auto& c : cases) {
    const uint64_t st = static_cast<uint64_t>(c.n * 1000 + c.vocab_begin * 100 + c.vocab_local * 10 + c.hidden);
    // Tokens over a wider vocab than the shard (some outside it), with repeats.
    const auto tokens = random_ints(c.n, kSeed, st, 0, static_cast<int32_t>(c.vocab_begin + c.vocab_local + 2));
    auto table = random_vec(c.vocab_local * c.hidden, kSeed, st + 1);
    const auto r = random_vec(c.n * c.hidden, kSeed, st + 2);
    std::vector<double> out(c.n * c.hidden);
    auto loss = [&] {
      embedding_forward<double>(tokens.data(), c.n, table.data(), c.vocab_begin, c.vocab_local, c.hidden, out.data());
      return dot(r, out);
    };
    const auto dtable0 = random_vec(table.size(), kSeed, st + 3);
    auto dtable = dtable0;
    embedding_backward<double>(tokens.data(), c.n, r.data(), c.vocab_begin, c.vocab_local, c.hidden, dtable.data());
    for (size_t i = 0; i < dtable.size(); ++i) dtable[i] -= dtable0[i];
    expect_grad("embedding n " + std::to_string(c.n) + " shard " + std::to_string(c.vocab_begin) + "+" +
                    std::to_string(c.vocab_local),
                table, dtable, loss);
  }
}

// ---- Cross-entropy ------------------------------------------------------------------------------

TEST(CrossEntropyGradTest, LossGradientMatchesFiniteDifferences) {
  constexpr int32_t kIgnore = -100;
  const int64_t shapes[][2] = {{1, 3}, {5, 11}, {8, 17}, {3, 1}};
  for (double dloss : {1.0, 0.37}) {
    for (const auto& s : shapes) {
      const int64_t tokens = s[0], vocab = s[1];
      const uint64_t st = static_cast<uint64_t>(tokens * 100 + vocab);
      auto logits = random_vec(tokens * vocab, kSeed, st, 2.0);
      auto targets = random_ints(tokens, kSeed, st + 1, 0, static_cast<int32_t>(vocab - 1));
      if (tokens > 2) targets[1] = kIgnore;
      const int64_t count = count_targets(targets.data(), tokens, kIgnore);
      std::vector<double> lse(tokens);
      const TpReducer local = make_local_reducer();
      auto loss = [&] {
        return dloss * cross_entropy_forward<double>(logits.data(), targets.data(), tokens, 0, vocab, kIgnore, local,
                                                     lse.data());
      };
      loss();
      std::vector<double> dlogits(tokens * vocab, 5.0);
      cross_entropy_backward<double>(logits.data(), targets.data(), lse.data(), tokens, 0, vocab, kIgnore, count, dloss,
                                     dlogits.data());
      expect_grad("cross_entropy tokens " + std::to_string(tokens) + " vocab " + std::to_string(vocab) + " dloss " +
                      std::to_string(dloss),
                  logits, dlogits, loss);
    }
  }
}

}  // namespace
}  // namespace echo::cpu
