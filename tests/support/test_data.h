// Deterministic test inputs: every rank can regenerate every other rank's contribution from
// (seed, rank), so multi-rank tests compute their references locally in double precision.
#pragma once

#include <cstdint>
#include <random>
#include <vector>

namespace echo::testing {

// Normal(mean, stddev) values; distinct per (seed, stream).
inline std::vector<float> random_normal(size_t n, uint64_t seed, uint64_t stream, float mean = 0.0f,
                                        float stddev = 1.0f) {
  std::mt19937_64 gen(seed * 0x9E3779B97F4A7C15ull + stream * 0xBF58476D1CE4E5B9ull + 1);
  std::normal_distribution<float> dist(mean, stddev);
  std::vector<float> v(n);
  for (auto& x : v) x = dist(gen);
  return v;
}

}  // namespace echo::testing
