// Shared helpers of the backend op tests: fixed-seed random inputs (never zeros) and
// comparisons that report the worst element.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../support/vector_norms.h"

namespace echo::cpu::testing {

// Normal(0, stddev) doubles; a fresh stream per (seed, stream) pair.
inline std::vector<double> random_vec(size_t n, uint64_t seed, uint64_t stream, double stddev = 1.0) {
  std::mt19937_64 gen(seed * 0x9E3779B97F4A7C15ull + stream * 0xBF58476D1CE4E5B9ull + 7);
  std::normal_distribution<double> dist(0.0, stddev);
  std::vector<double> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

// Uniform integers in [lo, hi].
inline std::vector<int32_t> random_ints(size_t n, uint64_t seed, uint64_t stream, int32_t lo, int32_t hi) {
  std::mt19937_64 gen(seed * 0x94D049BB133111EBull + stream * 0x2545F4914F6CDD1Dull + 11);
  std::uniform_int_distribution<int32_t> dist(lo, hi);
  std::vector<int32_t> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

template <class To, class From>
std::vector<To> cast_vec(const std::vector<From>& v) {
  return std::vector<To>(v.begin(), v.end());
}

// Rounds every value to float, so a float and a double run start from identical inputs.
inline std::vector<double> float_exact(std::vector<double> v) {
  for (auto& x : v) x = static_cast<double>(static_cast<float>(x));
  return v;
}

using echo::testing::max_abs;

// Elementwise |a - ref| <= atol + rtol * |ref|; one failure naming the worst element.
template <class A>
void expect_close(const std::vector<A>& a, const std::vector<double>& ref, double rtol, double atol,
                  const std::string& what) {
  ASSERT_EQ(a.size(), ref.size()) << what;
  double worst = 0.0;
  size_t worst_idx = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    const double err = std::abs(static_cast<double>(a[i]) - ref[i]);
    const double ratio = err / (atol + rtol * std::abs(ref[i]));
    if (!(ratio <= worst)) {  // also catches NaN
      worst = ratio;
      worst_idx = i;
    }
  }
  EXPECT_LE(worst, 1.0) << what << ": element " << worst_idx << " is " << static_cast<double>(a[worst_idx])
                        << ", expected " << ref[worst_idx] << " (rtol " << rtol << ", atol " << atol << ")";
}

// Normwise relative error max|a - ref| / max|ref|.
template <class A>
double max_rel_error(const std::vector<A>& a, const std::vector<double>& ref) {
  double err = 0.0;
  for (size_t i = 0; i < a.size(); ++i) err = std::max(err, std::abs(static_cast<double>(a[i]) - ref[i]));
  return err / max_abs(ref);
}

}  // namespace echo::cpu::testing
