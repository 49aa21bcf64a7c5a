// cuda::rmsnorm_forward / rmsnorm_backward against the CPU reference (cpu::rmsnorm_*<double> on
// the same inputs): f32 within 1e-5, bf16 within 1e-2 (max-abs-normalized); both row layouts (a warp
// per row up to dim 1024, a block per row above), odd sizes, many rows (the chunked dw reduction),
// a 3-D x, in place, and the same bits on a second run.
#include <gtest/gtest.h>

#include <vector>

#include "../support/gpu_test.h"
#include "backend/ops.h"
#include "ops.cuh"
#include "ops_cuda_test_util.h"

namespace echo {
namespace {

using namespace echo::testing;

struct Shape {
  std::vector<int64_t> x;  // (rows, dim) or (tokens, heads, head_dim)
};

const Shape kShapes[] = {{{1, 8}},    {{7, 33}},    {{37, 128}}, {{300, 96}},  {{5, 1000}},  {{3, 1024}},
                         {{3, 1025}}, {{17, 2048}}, {{4, 5000}}, {{1000, 64}}, {{70000, 8}}, {{5, 3, 16}}};

TEST(RmsNormCuda, MatchesCpuReference) {
  ECHO_REQUIRE_DEVICE();
  const double eps = 1e-6;
  uint32_t seed = 100;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (const Shape& s : kShapes) {
      const int64_t dim = s.x.back();
      int64_t numel = 1;
      for (int64_t e : s.x) numel *= e;
      const int64_t rows = numel / dim;
      SCOPED_TRACE(dtype_name(dtype) + " rows " + std::to_string(rows) + " dim " + std::to_string(dim));

      const std::vector<float> x = rounded_to(random_floats(numel, seed++, 1.5f), dtype);
      const std::vector<float> w = rounded_to(random_floats(dim, seed++, 0.3f, 1.0f), dtype);
      const std::vector<float> dout = rounded_to(random_floats(numel, seed++), dtype);
      const std::vector<float> dw0 = random_floats(dim, seed++, 0.5f);

      // Reference in double on the same values.
      const std::vector<double> xd = to_double(x), wd = to_double(w), doutd = to_double(dout);
      std::vector<double> out_ref(numel), rstd_ref(rows), dx_ref(numel), dw_ref = to_double(dw0);
      cpu::rmsnorm_forward<double>(xd.data(), wd.data(), rows, dim, eps, out_ref.data(), rstd_ref.data());
      cpu::rmsnorm_backward<double>(doutd.data(), xd.data(), wd.data(), rstd_ref.data(), rows, dim, dx_ref.data(),
                                    dw_ref.data());

      Tensor d_x = device_tensor(x, s.x, dtype);
      Tensor d_w = device_tensor(w, {dim}, dtype);
      Tensor d_out = Tensor::empty(s.x, dtype, Device::cuda);
      Tensor d_rstd = Tensor::empty({rows}, DType::f32, Device::cuda);
      cuda::rmsnorm_forward(d_x, d_w, eps, d_out, d_rstd, nullptr);
      EXPECT_TRUE(close_normalized(host_floats(d_out), out_ref, tolerance(dtype)));
      EXPECT_TRUE(close_normalized(host_floats(d_rstd), rstd_ref, 1e-5));

      Tensor d_dout = device_tensor(dout, s.x, dtype);
      Tensor d_dx = Tensor::empty(s.x, dtype, Device::cuda);
      Tensor d_dw = device_tensor(dw0, {dim}, DType::f32);
      cuda::rmsnorm_backward(d_dout, d_x, d_w, d_rstd, d_dx, d_dw, nullptr);
      const std::vector<float> dx = host_floats(d_dx), dw = host_floats(d_dw);
      EXPECT_TRUE(close_normalized(dx, dx_ref, tolerance(dtype)));
      EXPECT_TRUE(close_normalized(dw, dw_ref, 1e-5));  // f32 accumulator, fp32 math on the same inputs

      // Determinism: a second backward from the same accumulator gives the same bits.
      Tensor d_dx2 = Tensor::empty(s.x, dtype, Device::cuda);
      Tensor d_dw2 = device_tensor(dw0, {dim}, DType::f32);
      cuda::rmsnorm_backward(d_dout, d_x, d_w, d_rstd, d_dx2, d_dw2, nullptr);
      EXPECT_TRUE(same_bits(host_floats(d_dx2), dx));
      EXPECT_TRUE(same_bits(host_floats(d_dw2), dw));

      // In place (out = x, dx = dout), as the CPU allows: the same bits as out of place.
      Tensor d_xi = device_tensor(x, s.x, dtype);
      Tensor d_rstd_i = Tensor::empty({rows}, DType::f32, Device::cuda);
      cuda::rmsnorm_forward(d_xi, d_w, eps, d_xi, d_rstd_i, nullptr);
      EXPECT_TRUE(same_bits(host_floats(d_xi), host_floats(d_out)));
      Tensor d_douti = device_tensor(dout, s.x, dtype);
      Tensor d_dwi = device_tensor(dw0, {dim}, DType::f32);
      cuda::rmsnorm_backward(d_douti, d_x, d_w, d_rstd, d_douti, d_dwi, nullptr);
      EXPECT_TRUE(same_bits(host_floats(d_douti), dx));
      EXPECT_TRUE(same_bits(host_floats(d_dwi), dw));
    }
  }
}

TEST(RmsNormCuda, RejectsBadArguments) {
  ECHO_REQUIRE_DEVICE();
  Tensor x = device_tensor(random_floats(24, 1), {4, 6}, DType::f32);
  Tensor w = device_tensor(random_floats(6, 2), {6}, DType::f32);
  Tensor w_bf16 = device_tensor(rounded_to(random_floats(6, 2), DType::bf16), {6}, DType::bf16);
  Tensor out = Tensor::empty({4, 6}, DType::f32, Device::cuda);
  Tensor rstd = Tensor::empty({4}, DType::f32, Device::cuda);
  Tensor rstd_short = Tensor::empty({3}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::rmsnorm_forward(x, w_bf16, 1e-6, out, rstd, nullptr), Error);
  EXPECT_THROW(cuda::rmsnorm_forward(x, w, 1e-6, out, rstd_short, nullptr), Error);
  Tensor host_x = Tensor::zeros({4, 6}, DType::f32);
  EXPECT_THROW(cuda::rmsnorm_forward(host_x, w, 1e-6, out, rstd, nullptr), Error);
}

}  // namespace
}  // namespace echo
