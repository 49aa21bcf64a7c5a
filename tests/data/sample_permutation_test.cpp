// SamplePermutation: a bijection for every size, uniform positions (chi-square), no structure
// left in a large shuffle, and pinned values so a silent change of the order (which would break
// bit-for-bit resume of old runs) fails here.
#include "data/sample_permutation.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdlib>
#include <vector>

namespace echo::data {
namespace {

TEST(SamplePermutationTest, IsABijectionForEverySize) {
  for (uint64_t n : {1ull, 2ull, 3ull, 4ull, 5ull, 7ull, 16ull, 17ull, 100ull, 1000ull, 4097ull}) {
    for (uint64_t seed : {0ull, 1ull, 0xdeadbeefcafef00dull}) {
      const SamplePermutation perm(n, seed);
      std::vector<int> hits(n, 0);
      for (uint64_t i = 0; i < n; ++i) {
        const uint64_t p = perm(i);
        ASSERT_LT(p, n);
        ++hits[p];
      }
      for (uint64_t k = 0; k < n; ++k) ASSERT_EQ(hits[k], 1) << "n " << n << " seed " << seed << " value " << k;
    }
  }
}

TEST(SamplePermutationTest, PositionsAreUniformOverSeeds) {
  // Where position 0 and 1 land, over 16000 seeds, n = 8: 56 ordered pairs, ~286 each.
  constexpr int kN = 8, kSeeds = 16000;
  std::vector<double> pairs(kN * kN, 0.0);
  for (uint64_t seed = 0; seed < kSeeds; ++seed) {
    const SamplePermutation perm(kN, seed);
    pairs[perm(0) * kN + perm(1)] += 1.0;
  }
  const double expected = static_cast<double>(kSeeds) / (kN * (kN - 1));
  double chi2 = 0.0;
  for (int a = 0; a < kN; ++a)
    for (int b = 0; b < kN; ++b) {
      if (a == b) {
        EXPECT_EQ(pairs[a * kN + b], 0.0);
        continue;
      }
      chi2 += (pairs[a * kN + b] - expected) * (pairs[a * kN + b] - expected) / expected;
    }
  EXPECT_LT(chi2, 100.0) << "55 degrees of freedom: the 99.9% quantile is about 93";
}

TEST(SamplePermutationTest, LargeShuffleHasNoStructure) {
  constexpr uint64_t kN = 10000;
  const SamplePermutation perm(kN, 2024);
  int fixed = 0;
  double displacement = 0.0, adjacent = 0.0;
  for (uint64_t i = 0; i < kN; ++i) {
    const uint64_t p = perm(i);
    fixed += p == i;
    displacement += std::abs(static_cast<double>(p) - static_cast<double>(i));
    if (i + 1 < kN) adjacent += std::abs(static_cast<double>(perm(i + 1)) - static_cast<double>(p)) == 1.0;
  }
  EXPECT_LE(fixed, 8);                                   // Poisson(1)
  EXPECT_NEAR(displacement / kN / kN, 1.0 / 3.0, 0.02);  // E|U - V| = 1/3 for a uniform shuffle
  EXPECT_LE(adjacent, 10.0);                             // neighbours stay neighbours ~2 times in a random order
}

TEST(SamplePermutationTest, PinnedOrder) {
  const SamplePermutation perm(10, 1234);
  std::vector<uint64_t> order;
  for (uint64_t i = 0; i < 10; ++i) order.push_back(perm(i));
  EXPECT_EQ(order, (std::vector<uint64_t>{0, 7, 3, 1, 9, 8, 5, 2, 6, 4}));
  EXPECT_EQ(SamplePermutation(1, 99)(0), 0u);
}

}  // namespace
}  // namespace echo::data
