// The int8 GEMM against a double-precision reference: integer accumulation is exact, so every
// layout, odd size and long contraction must agree to the last bit.
#include "quant/int8_gemm.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "core/error.h"

namespace echo::quant {
namespace {

std::vector<int8_t> random_codes(int64_t n, uint32_t seed, int lo = -128, int hi = 127) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<int> d(lo, hi);
  std::vector<int8_t> v(n);
  for (auto& x : v) x = static_cast<int8_t>(d(rng));
  return v;
}

// C = op(A)·op(B) in double, as cpu::gemm defines op().
std::vector<double> reference(bool ta, bool tb, int64_t m, int64_t n, int64_t k, const std::vector<int8_t>& a,
                              const std::vector<int8_t>& b) {
  std::vector<double> c(m * n, 0.0);
  for (int64_t i = 0; i < m; ++i)
    for (int64_t j = 0; j < n; ++j) {
      double s = 0.0;
      for (int64_t q = 0; q < k; ++q) s += double(ta ? a[q * m + i] : a[i * k + q]) * double(tb ? b[j * k + q] : b[q * n + j]);
      c[i * n + j] = s;
    }
  return c;
}

void expect_exact(bool ta, bool tb, int64_t m, int64_t n, int64_t k, uint32_t seed) {
  const auto a = random_codes(m * k, seed), b = random_codes(k * n, seed + 1);
  const auto ref = reference(ta, tb, m, n, k, a, b);
  std::vector<int32_t> c(m * n, 12345);
  gemm_s8s32(ta, tb, m, n, k, a.data(), b.data(), c.data());
  int64_t bad = 0;
  for (int64_t i = 0; i < m * n; ++i) bad += static_cast<double>(c[i]) != ref[i];
  EXPECT_EQ(bad, 0) << "ta=" << ta << " tb=" << tb << " m=" << m << " n=" << n << " k=" << k;
}

TEST(Int8GemmTest, AllLayoutsOddSizesExact) {
  const int64_t shapes[][3] = {{1, 1, 1}, {3, 5, 7}, {4, 4, 64}, {5, 9, 65}, {17, 13, 130}, {33, 70, 31}, {8, 3, 200}};
  uint32_t seed = 1;
  for (const auto& s : shapes)
    for (bool ta : {false, true})
      for (bool tb : {false, true}) expect_exact(ta, tb, s[0], s[1], s[2], seed++);
}

// Long contractions (the library blocks k internally) and wide outputs.
TEST(Int8GemmTest, LongContractionExact) {
  expect_exact(false, true, 5, 70, 9000, 77);
  expect_exact(true, false, 6, 3, 4097, 78);
}

// The extreme codes: -128 x -128 over a long k reaches k * 2^14, the largest sum int32 must hold.
TEST(Int8GemmTest, ExtremeCodesDoNotOverflow) {
  const int64_t m = 2, n = 3, k = 20000;
  std::vector<int8_t> a(m * k, -128), b(n * k, -128);
  for (int64_t q = 0; q < k; ++q) b[1 * k + q] = 127;  // row 1 of B^T: -128 * 127
  std::vector<int32_t> c(m * n);
  gemm_s8s32(false, true, m, n, k, a.data(), b.data(), c.data());
  for (int64_t i = 0; i < m; ++i) {
    EXPECT_EQ(c[i * n + 0], k * 16384);
    EXPECT_EQ(c[i * n + 1], -k * 16256);
    EXPECT_EQ(c[i * n + 2], k * 16384);
  }
}

TEST(Int8GemmTest, EmptyContractionGivesZerosAndBadSizesThrow) {
  std::vector<int32_t> c(6, 7);
  gemm_s8s32(false, false, 2, 3, 0, nullptr, nullptr, c.data());
  for (int32_t v : c) EXPECT_EQ(v, 0);
  const int8_t x = 1;
  EXPECT_THROW(gemm_s8s32(false, false, -1, 1, 1, &x, &x, c.data()), Error);
  EXPECT_THROW(gemm_s8s32(false, false, 1, 1, kInt8GemmMaxK + 1, &x, &x, c.data()), Error);
}

}  // namespace
}  // namespace echo::quant
