// The once-rounded fp32 helpers of core/hd.h must stay unfused on the host even when the code is
// built for a CPU with FMA (-march=native implies -mfma): the CUDA kernels round every op
// separately, so a host FMA would break CPU/GPU bit identity. This file is compiled with -mfma
// (tests/core/CMakeLists.txt); the project-wide -ffp-contract=off is what keeps it exact.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>

#include "core/hd.h"

namespace echo {
namespace {

// a·b + c with the product and the sum each rounded to fp32, computed in double: the product of
// two floats is exact in double, and rounding a double sum of two floats to float is the same as
// rounding it once, so this is the unfused result. NOTE: the product goes through a volatile
// store, or GCC narrows float(double(a)·double(b)) back to a float multiply and fuses it too.
float unfused_reference(float a, float b, float c) {
  const volatile float product = static_cast<float>(static_cast<double>(a) * static_cast<double>(b));
  return static_cast<float>(static_cast<double>(product) + static_cast<double>(c));
}

TEST(FpContractTest, MulAddHelpersAreNotFusedUnderFma) {
#if defined(__x86_64__)
  if (!__builtin_cpu_supports("fma")) GTEST_SKIP() << "CPU without FMA: nothing could be fused";
#endif
  std::mt19937 rng(20261130);
  std::uniform_real_distribution<float> dist(-4.0f, 4.0f);
  int mismatches = 0;
  int checked = 0;
  for (int i = 0; i < 100000; ++i) {
    // volatile: the values reach the arithmetic at run time, so nothing is constant-folded.
    volatile float a = dist(rng), b = dist(rng), c = dist(rng);
    const float got = add_rn(mul_rn(a, b), c);
    const float want = unfused_reference(a, b, c);
    mismatches += float_bits(got) != float_bits(want);
    ++checked;
  }
  EXPECT_EQ(mismatches, 0) << "of " << checked << " a*b+c computed through add_rn(mul_rn()) differ from the "
                           << "separately rounded result: the host build fuses them (missing -ffp-contract=off?)";
}

}  // namespace
}  // namespace echo
