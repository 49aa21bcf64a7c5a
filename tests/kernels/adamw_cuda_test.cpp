// cuda::adamw_step against the CPU optimizer's element update (backend::adamw_update on the host):
// weights and both moments bit-identical over two steps, with and without weight decay, odd sizes.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "../support/gpu_test.h"
#include "backend/adamw_math.h"
#include "ops.cuh"
#include "ops_cuda_test_util.h"

namespace echo {
namespace {

using namespace echo::testing;

// The scalars as train/adamw.cpp makes them for step t.
backend::AdamWScalars scalars(double lr, double beta1, double beta2, double eps, int t) {
  backend::AdamWScalars s;
  s.beta1 = static_cast<float>(beta1);
  s.beta2 = static_cast<float>(beta2);
  s.one_minus_beta1 = 1.0f - s.beta1;
  s.one_minus_beta2 = 1.0f - s.beta2;
  s.step_size = static_cast<float>(lr / (1.0 - std::pow(beta1, t)));
  s.inv_sqrt_bc2 = static_cast<float>(1.0 / std::sqrt(1.0 - std::pow(beta2, t)));
  s.eps = static_cast<float>(eps);
  return s;
}

TEST(AdamWCuda, MatchesCpuUpdateBitForBit) {
  ECHO_REQUIRE_DEVICE();
  uint32_t seed = 1000;
  for (int64_t n : {int64_t{1}, int64_t{1000}, int64_t{65537}, (int64_t{1} << 20) + 5}) {
    for (float decay : {1.0f, static_cast<float>(1.0 - 3e-4 * 0.1)}) {
      SCOPED_TRACE("n " + std::to_string(n) + " decay " + std::to_string(decay));
      std::vector<float> w = random_floats(n, seed++, 0.05f);
      std::vector<float> m = random_floats(n, seed++, 1e-3f);
      std::vector<float> v = random_floats(n, seed++, 1e-3f);
      for (float& x : v) x = x * x;  // second moments are non-negative
      Tensor d_w = device_tensor(w, {n}, DType::f32);
      Tensor d_m = device_tensor(m, {n}, DType::f32);
      Tensor d_v = device_tensor(v, {n}, DType::f32);
      for (int t = 7; t <= 8; ++t) {
        std::vector<float> g = random_floats(n, seed++, 1e-2f);
        g[0] = t == 7 ? 3.0f : -1e-8f;  // a large and a tiny gradient
        const backend::AdamWScalars s = scalars(3e-4, 0.9, 0.95, 1e-5, t);
        for (int64_t i = 0; i < n; ++i) backend::adamw_update(w[i], g[i], m[i], v[i], decay, s);
        cuda::adamw_step(d_w, device_tensor(g, {n}, DType::f32), d_m, d_v, decay, s, nullptr);
        EXPECT_TRUE(same_bits(host_floats(d_w), w)) << "step " << t;
        EXPECT_TRUE(same_bits(host_floats(d_m), m)) << "step " << t;
        EXPECT_TRUE(same_bits(host_floats(d_v), v)) << "step " << t;
      }
    }
  }
}

TEST(AdamWCuda, RejectsBadArguments) {
  ECHO_REQUIRE_DEVICE();
  Tensor w = device_tensor(random_floats(8, 1), {8}, DType::f32);
  Tensor g_short = device_tensor(random_floats(7, 2), {7}, DType::f32);
  Tensor g_bf16 = device_tensor(rounded_to(random_floats(8, 2), DType::bf16), {8}, DType::bf16);
  Tensor m = device_tensor(random_floats(8, 3), {8}, DType::f32);
  Tensor v = device_tensor(random_floats(8, 4), {8}, DType::f32);
  EXPECT_THROW(cuda::adamw_step(w, g_short, m, v, 1.0f, backend::AdamWScalars{}, nullptr), Error);
  EXPECT_THROW(cuda::adamw_step(w, g_bf16, m, v, 1.0f, backend::AdamWScalars{}, nullptr), Error);
}

}  // namespace
}  // namespace echo
