// cuda::swiglu_forward / swiglu_backward against the CPU reference (cpu::swiglu_*<double> on the
// same inputs): f32 within 1e-5, bf16 within 1e-2 (max-abs-normalized), odd sizes and gates from
// the saturated ranges of the sigmoid.
#include <gtest/gtest.h>

#include <vector>

#include "../support/gpu_test.h"
#include "backend/ops.h"
#include "ops.cuh"
#include "ops_cuda_test_util.h"

namespace echo {
namespace {

using namespace echo::testing;

TEST(SwigluCuda, MatchesCpuReference) {
  ECHO_REQUIRE_DEVICE();
  uint32_t seed = 300;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t n : {int64_t{1}, int64_t{31}, int64_t{1000}, int64_t{4099}, int64_t{100003}}) {
      SCOPED_TRACE(dtype_name(dtype) + " n " + std::to_string(n));
      std::vector<float> gate = random_floats(n, seed++, 3.0f);
      gate[0] = n > 1 ? -18.5f : 0.75f;  // sigmoid ~ 0
      if (n > 2) gate[n / 2] = 17.25f;   // sigmoid ~ 1
      gate = rounded_to(gate, dtype);
      const std::vector<float> up = rounded_to(random_floats(n, seed++), dtype);
      const std::vector<float> dout = rounded_to(random_floats(n, seed++), dtype);

      const std::vector<double> gd = to_double(gate), ud = to_double(up), dyd = to_double(dout);
      std::vector<double> out_ref(n), dgate_ref(n), dup_ref(n);
      cpu::swiglu_forward<double>(gd.data(), ud.data(), n, out_ref.data());
      cpu::swiglu_backward<double>(dyd.data(), gd.data(), ud.data(), n, dgate_ref.data(), dup_ref.data());

      Tensor d_gate = device_tensor(gate, {n}, dtype);
      Tensor d_up = device_tensor(up, {n}, dtype);
      Tensor d_dout = device_tensor(dout, {n}, dtype);
      Tensor d_out = Tensor::empty({n}, dtype, Device::cuda);
      Tensor d_dgate = Tensor::empty({n}, dtype, Device::cuda);
      Tensor d_dup = Tensor::empty({n}, dtype, Device::cuda);
      cuda::swiglu_forward(d_gate, d_up, d_out, nullptr);
      cuda::swiglu_backward(d_dout, d_gate, d_up, d_dgate, d_dup, nullptr);
      EXPECT_TRUE(close_normalized(host_floats(d_out), out_ref, tolerance(dtype)));
      EXPECT_TRUE(close_normalized(host_floats(d_dgate), dgate_ref, tolerance(dtype)));
      EXPECT_TRUE(close_normalized(host_floats(d_dup), dup_ref, tolerance(dtype)));
    }
  }
}

TEST(SwigluCuda, RejectsBadArguments) {
  ECHO_REQUIRE_DEVICE();
  Tensor gate = device_tensor(random_floats(10, 1), {10}, DType::f32);
  Tensor up_short = device_tensor(random_floats(9, 2), {9}, DType::f32);
  Tensor up_bf16 = device_tensor(rounded_to(random_floats(10, 2), DType::bf16), {10}, DType::bf16);
  Tensor out = Tensor::empty({10}, DType::f32, Device::cuda);
  EXPECT_THROW(cuda::swiglu_forward(gate, up_short, out, nullptr), Error);
  EXPECT_THROW(cuda::swiglu_forward(gate, up_bf16, out, nullptr), Error);
}

}  // namespace
}  // namespace echo
