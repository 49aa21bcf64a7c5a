// cuda::accumulate_sum_squares and accumulate_max_abs against the CPU backend's loops: the sum
// within 1e-10 relative of the element-order double sum (the squares are exact; only the order of
// the additions differs) and the same bits on a second run; the max exact, +inf once any element is
// NaN or infinite; f32 and bf16, sizes up to the cap on pass-1 blocks and beyond.
#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "../support/gpu_test.h"
#include "ops.cuh"
#include "ops_cuda_test_util.h"

namespace echo {
namespace {

using namespace echo::testing;

const int64_t kSizes[] = {1, 1000, 4099, 2048 * 1024, 3 * 1024 * 1024 + 7};

Tensor device_scalar(double value) {
  return Tensor::from_vector(std::vector<double>{value}, {1}, DType::f64).to(Device::cuda);
}

double read_scalar(const Tensor& acc) {
  sync_device();
  return acc.to(Device::cpu).to_vector<double>()[0];
}

TEST(ReductionsCuda, SumSquaresMatchesCpu) {
  ECHO_REQUIRE_DEVICE();
  uint32_t seed = 1100;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(dtype_name(dtype) + " n " + std::to_string(n));
      const std::vector<float> x = rounded_to(random_floats(n, seed++, 0.1f), dtype);
      double want = 1.5;
      for (float v : x) want += static_cast<double>(v) * v;
      Tensor d_x = device_tensor(x, {n}, dtype);
      Tensor acc = device_scalar(1.5);
      cuda::accumulate_sum_squares(d_x, acc, nullptr);
      const double got = read_scalar(acc);
      EXPECT_LE(std::fabs(got - want), 1e-10 * want) << got << " vs " << want;
      Tensor acc2 = device_scalar(1.5);
      cuda::accumulate_sum_squares(d_x, acc2, nullptr);
      EXPECT_EQ(read_scalar(acc2), got);  // the same bits
    }
  }
}

TEST(ReductionsCuda, MaxAbsIsExact) {
  ECHO_REQUIRE_DEVICE();
  uint32_t seed = 1200;
  for (DType dtype : {DType::f32, DType::bf16}) {
    for (int64_t n : kSizes) {
      SCOPED_TRACE(dtype_name(dtype) + " n " + std::to_string(n));
      std::vector<float> x = random_floats(n, seed++);
      x[(n * 7) / 11] = -9.5f;  // the largest magnitude, negative, somewhere inside
      x = rounded_to(x, dtype);
      Tensor d_x = device_tensor(x, {n}, dtype);
      Tensor acc = device_scalar(0.5);
      cuda::accumulate_max_abs(d_x, acc, nullptr);
      EXPECT_EQ(read_scalar(acc), 9.5);
      Tensor big = device_scalar(100.0);  // acc above every |x| stays
      cuda::accumulate_max_abs(d_x, big, nullptr);
      EXPECT_EQ(read_scalar(big), 100.0);

      for (float bad : {std::numeric_limits<float>::quiet_NaN(), -std::numeric_limits<float>::infinity()}) {
        std::vector<float> y = x;
        y[n - 1] = bad;
        Tensor d_y = device_tensor(y, {n}, dtype);
        Tensor acc_bad = device_scalar(0.5);
        cuda::accumulate_max_abs(d_y, acc_bad, nullptr);
        EXPECT_EQ(read_scalar(acc_bad), std::numeric_limits<double>::infinity()) << bad;
      }
    }
  }
}

TEST(ReductionsCuda, RejectsBadArguments) {
  ECHO_REQUIRE_DEVICE();
  Tensor x = device_tensor(random_floats(8, 1), {8}, DType::f32);
  Tensor acc_f32 = Tensor::zeros({1}, DType::f32, Device::cuda);
  Tensor acc_two = Tensor::zeros({2}, DType::f64, Device::cuda);
  EXPECT_THROW(cuda::accumulate_sum_squares(x, acc_f32, nullptr), Error);
  EXPECT_THROW(cuda::accumulate_max_abs(x, acc_two, nullptr), Error);
}

}  // namespace
}  // namespace echo
