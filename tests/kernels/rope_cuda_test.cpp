// cuda::rope_forward / rope_backward against the CPU reference (cpu::rope_*<double> on the same
// inputs): f32 within 1e-5, bf16 within 1e-2 (max-abs-normalized), for odd head counts, half
// head_dims that are not a multiple of 32, positions up to 10^5 and both Qwen3's and Llama's base;
// backward after forward gives the input back.
#include <gtest/gtest.h>

#include <random>
#include <vector>

#include "../support/gpu_test.h"
#include "backend/ops.h"
#include "ops.cuh"
#include "ops_cuda_test_util.h"

namespace echo {
namespace {

using namespace echo::testing;

struct Shape {
  int64_t tokens, heads, head_dim;
};

TEST(RopeCuda, MatchesCpuReference) {
  ECHO_REQUIRE_DEVICE();
  const Shape shapes[] = {{1, 1, 2}, {7, 3, 64}, {33, 5, 128}, {100, 2, 34}, {5, 16, 128}, {300, 1, 6}, {2, 7, 256}};
  uint32_t seed = 200;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (double base : {1e6, 1e4}) {
      for (const Shape& s : shapes) {
        SCOPED_TRACE(dtype_name(dtype) + " base " + std::to_string(base) + " (" + std::to_string(s.tokens) + ", " +
                     std::to_string(s.heads) + ", " + std::to_string(s.head_dim) + ")");
        const int64_t numel = s.tokens * s.heads * s.head_dim;
        const std::vector<float> x = rounded_to(random_floats(numel, seed++), dtype);
        std::mt19937 rng(seed++);
        std::uniform_int_distribution<int32_t> pos_dist(0, 40959);
        std::vector<int32_t> positions(s.tokens);
        for (int32_t& p : positions) p = pos_dist(rng);
        positions[0] = s.tokens > 1 ? 0 : 100000;  // position 0 (identity) and one past the usual range
        if (s.tokens > 2) positions[1] = 100000;

        std::vector<double> fwd_ref = to_double(x);
        cpu::rope_forward<double>(fwd_ref.data(), positions.data(), s.tokens, s.heads, s.head_dim, base);
        std::vector<double> bwd_ref = to_double(x);
        cpu::rope_backward<double>(bwd_ref.data(), positions.data(), s.tokens, s.heads, s.head_dim, base);

        const std::vector<int64_t> shape = {s.tokens, s.heads, s.head_dim};
        Tensor d_pos = device_i32(positions, {s.tokens});
        Tensor d_x = device_tensor(x, shape, dtype);
        cuda::rope_forward(d_x, d_pos, base, nullptr);
        EXPECT_TRUE(close_normalized(host_floats(d_x), fwd_ref, tolerance(dtype)));

        Tensor d_dx = device_tensor(x, shape, dtype);
        cuda::rope_backward(d_dx, d_pos, base, nullptr);
        EXPECT_TRUE(close_normalized(host_floats(d_dx), bwd_ref, tolerance(dtype)));

        // The transpose undoes the rotation (up to one rounding per op).
        cuda::rope_backward(d_x, d_pos, base, nullptr);
        EXPECT_TRUE(close_normalized(host_floats(d_x), x, 2 * tolerance(dtype)));
      }
    }
  }
}

TEST(RopeCuda, RejectsBadArguments) {
  ECHO_REQUIRE_DEVICE();
  Tensor x = device_tensor(random_floats(4 * 2 * 6, 1), {4, 2, 6}, DType::f32);
  Tensor odd = device_tensor(random_floats(4 * 2 * 5, 1), {4, 2, 5}, DType::f32);
  Tensor flat = device_tensor(random_floats(8 * 6, 1), {8, 6}, DType::f32);
  Tensor pos = device_i32({0, 1, 2, 3}, {4});
  Tensor pos_short = device_i32({0, 1, 2}, {3});
  EXPECT_THROW(cuda::rope_forward(odd, pos, 1e6, nullptr), Error);
  EXPECT_THROW(cuda::rope_forward(flat, pos, 1e6, nullptr), Error);
  EXPECT_THROW(cuda::rope_forward(x, pos_short, 1e6, nullptr), Error);
  EXPECT_THROW(cuda::rope_backward(x, pos, 0.0, nullptr), Error);
}

}  // namespace
}  // namespace echo
